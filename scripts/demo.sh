#!/usr/bin/env bash
# Set up (if needed) and run the main job: an offline discovery run on the embedded default.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh test
exec .venv/bin/metarl discover "$@"
