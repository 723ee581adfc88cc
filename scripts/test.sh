#!/usr/bin/env bash
# Set up (if needed) and run the test suite. Extra arguments go to pytest, e.g. `-m slow`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh test
# lint and format are part of the tests (ruff settings in pyproject.toml)
.venv/bin/ruff check metarl tests benchmarks
.venv/bin/ruff format --check --quiet metarl tests benchmarks
exec .venv/bin/python -m pytest "$@"
