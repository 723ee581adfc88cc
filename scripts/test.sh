#!/usr/bin/env bash
# Set up (if needed) and run the test suite. Extra arguments go to pytest, e.g. `-m slow`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh test
# The report's browser test renders a page in Debian's chromium: install it where we can (root
# with apt-get); where we cannot, that test is skipped and says why.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null
then
    log=$(mktemp)
    if ! (timeout 900 apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
        timeout 900 apt-get install -y -qq chromium) >"$log" 2>&1; then
        echo "chromium could not be installed with apt-get (see $log); the browser test will skip"
    fi
fi
# lint and format are part of the tests (ruff settings in pyproject.toml)
.venv/bin/ruff check metarl tests benchmarks
.venv/bin/ruff format --check --quiet metarl tests benchmarks
# Test files run in parallel, one file per worker process (its module fixtures are shared by
# its tests): as many workers as cores, at most 4 (each holds a JAX runtime and its sandboxes);
# METARL_TEST_WORKERS=0 runs them in this process. Measured: benchmarks/RESULTS.md.
workers="${METARL_TEST_WORKERS:-$(nproc 2>/dev/null || echo 2)}"
[ "$workers" -gt 4 ] && workers=4
exec .venv/bin/python -m pytest -n "$workers" --dist loadfile "$@"
