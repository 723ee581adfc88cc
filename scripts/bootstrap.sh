#!/usr/bin/env bash
# Create ./.venv and install metarl into it (editable) with the given extras.
# Re-running is cheap: it reinstalls only when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-test}"
python3 -m venv .venv 2>/dev/null || { echo "python3 -m venv failed: install python3-venv" >&2; exit 1; }
stamp=".venv/.metarl-installed-$extras"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".[$extras]"
    touch "$stamp"
fi
