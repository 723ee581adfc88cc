#!/usr/bin/env bash
# Build DiscoGen's runtime beside the checkout: ./.venv-discogen, a Python >= 3.12 venv with
# DiscoGen 1.3.0 and what its OnPolicyRL tasks import, at metarl's pins (jax 0.9.2, flax 0.12.6,
# gymnax 1.0.1). DiscoGen is installed --no-deps: its own requirements pull torch (a CUDA build
# on a CPU machine), transformers and datasets, none of which its RL tasks use. Its tasks'
# wrappers.py imports brax even for MinAtar, so brax comes too. Re-running is cheap.
# Then: export METARL_DISCOGEN_PYTHON=.venv-discogen/bin/python (README, DiscoGen).
set -euo pipefail
cd "$(dirname "$0")/.."
python=""
for candidate in python3.13 python3.12 "$HOME"/.pyenv/versions/3.1[23]*/bin/python3; do
    if command -v "$candidate" >/dev/null 2>&1 \
        && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
        python="$(command -v "$candidate")"
        break
    fi
done
if [ -z "$python" ]; then
    echo "no Python >= 3.12 found: DiscoGen needs one (the DiscoGen tests will skip)" >&2
    exit 1
fi
stamp=".venv-discogen/.installed-discogen-1.3.0"
if [ ! -f "$stamp" ] || [ "$0" -nt "$stamp" ]; then
    "$python" -m venv .venv-discogen
    .venv-discogen/bin/python -m pip install --quiet --upgrade pip
    .venv-discogen/bin/python -m pip install --quiet "jax==0.9.2" "jaxlib==0.9.2" \
        "flax==0.12.6" "gymnax==1.0.1" "optax>=0.2.4,<0.3" distrax chex pyyaml click brax
    .venv-discogen/bin/python -m pip install --quiet --no-deps "discogen==1.3.0"
    touch "$stamp"
fi
echo "DiscoGen runtime: $(pwd)/.venv-discogen/bin/python"
