"""Where DiscoGen runs: a Python interpreter that has the `discogen` package and its task
runtime (jax, flax, optax, distrax, gymnax, brax).

DiscoGen 1.3.0 needs Python >= 3.12, and metarl runs on 3.11 too, so DiscoGen is not imported
into metarl's process: everything DiscoGen does (building a task directory, running its
`main.py`) runs in that interpreter, as a separate process. The interpreter is, in order:
`--discogen-python`, `$METARL_DISCOGEN_PYTHON`, or this one when it has `discogen`
(`pip install "metarl[discogen]"` on Python >= 3.12). `scripts/discogen-runtime.sh` builds
one beside the checkout (`.venv-discogen`, with metarl's jax pins and `discogen --no-deps`, so
no CUDA torch lands on a CPU machine).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from metarl.errors import USAGE, MetarlError

logger = logging.getLogger(__name__)

DISCOGEN_VERSION = "1.3.0"  # the release whose OnPolicyRL contracts modules.py writes to
RUNTIME_ENVVAR = "METARL_DISCOGEN_PYTHON"
PROBE_TIMEOUT_S = 120.0
_PROBE = """\
import importlib.metadata, json, sys
try:
    version = importlib.metadata.version("discogen")
except importlib.metadata.PackageNotFoundError:
    version = None
print(json.dumps({"discogen": version, "python": sys.version.split()[0], "prefix": sys.prefix,
                  "base_prefix": sys.base_prefix, "executable": sys.executable}))
"""


class DiscoGenUnavailable(MetarlError, RuntimeError):
    """No interpreter with DiscoGen can be found or started; the message is one line."""

    exit_code = USAGE


@dataclass(frozen=True)
class Runtime:
    """An interpreter that has DiscoGen.

    Attributes:
        python: the interpreter's path, as given.
        discogen: the installed DiscoGen version.
        python_version: its Python version ("3.12.1").
        prefixes: its sys.prefix and sys.base_prefix (what a sandbox must bind to run it).
    """

    python: str
    discogen: str
    python_version: str
    prefixes: tuple[str, ...]


def install_hint() -> str:
    """How to get a runtime, in one sentence."""
    return (
        f"DiscoGen needs Python >= 3.12: run `bash scripts/discogen-runtime.sh` and set "
        f"{RUNTIME_ENVVAR}=.venv-discogen/bin/python, or pip install 'metarl[discogen]' on "
        "Python >= 3.12 (README, DiscoGen)"
    )


def find_runtime(python: str | None = None) -> Runtime:
    """The interpreter DiscoGen runs in (see the module docstring for the order).

    Args:
        python: an explicit interpreter (`--discogen-python`), or None.

    Returns:
        The runtime, its DiscoGen version checked.

    Raises:
        DiscoGenUnavailable: none is given and this interpreter lacks DiscoGen, or the given
            one cannot start, lacks DiscoGen, or has another release than DISCOGEN_VERSION.
    """
    chosen = python or os.environ.get(RUNTIME_ENVVAR) or None
    if chosen is None:
        if sys.version_info < (3, 12):
            version = ".".join(map(str, sys.version_info[:3]))
            raise DiscoGenUnavailable(
                f"DiscoGen is not available on Python {version}: " + install_hint()
            )
        chosen = sys.executable
    probe = _probe(chosen)
    if probe.get("discogen") is None:
        raise DiscoGenUnavailable(f"{chosen} has no discogen package: " + install_hint())
    if probe["discogen"] != DISCOGEN_VERSION:
        raise DiscoGenUnavailable(
            f"{chosen} has discogen {probe['discogen']}; metarl writes DiscoGen "
            f"{DISCOGEN_VERSION}'s modules: pip install discogen=={DISCOGEN_VERSION} --no-deps"
        )
    prefixes = tuple(dict.fromkeys(str(probe[key]) for key in ("prefix", "base_prefix")))
    return Runtime(chosen, probe["discogen"], probe["python"], prefixes)


def _probe(python: str) -> dict:
    """What `python` reports about itself (the DiscoGen version, its prefixes)."""
    if not Path(python).exists():
        raise DiscoGenUnavailable(f"no such DiscoGen interpreter: {python} ({install_hint()})")
    try:
        done = subprocess.run(
            [python, "-c", _PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise DiscoGenUnavailable(f"cannot start {python}: {error}") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise DiscoGenUnavailable(f"{python} failed to start: {tail}")
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        raise DiscoGenUnavailable(f"{python} did not answer the DiscoGen probe") from None
