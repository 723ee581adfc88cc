#!/usr/bin/env bash
# Set up (if needed) and run the main job: an offline discovery run on the embedded default.
set -euo pipefail
cd "$(dirname "$0")/.."
# discovery needs no extras; the heavy ones (torch, trl, ray: ~3 GB) come with the commands that
# use them (`bash scripts/bootstrap.sh grpo`, `... ray`) or with the tests
bash scripts/bootstrap.sh base
exec .venv/bin/metarl discover "$@"
