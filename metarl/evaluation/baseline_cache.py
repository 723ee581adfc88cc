"""The on-disk cache of baseline runs and random-policy returns (and, in `call-sizes/`, the
training programs' call sizes a trainer traced: `call_sizes_key`): written by the parent only.

A candidate's score is normalised against the task's baseline program trained with the *same*
seeds, budget and config, so a baseline is needed for every (env, budget, config) a suite uses
and every training seed a batch draws; entries are per seed (evaluation/seeds.py). Training
it costs as much as a candidate; it is computed once, in a trainer worker
that never loads a candidate, sent back to the parent, and kept in a JSON file per key under the
cache directory (METARL_CACHE_DIR, default ~/.cache/metarl). No sandboxed process is given the
cache's path, and none can write outside its own tmpfs.

Entries are verified on read: the key stored inside must be the key asked for and a checksum
must match the content, so a truncated, hand-edited or misplaced file is recomputed, never
trusted. Keys are built by `platform.evaluation_key` over `platform.evaluation_identity()`
(library versions, backend, XLA_FLAGS, the processor: they change the last bits of the returns),
the same identity and builder as every method's archived evaluation keys; all of it is read
from package metadata, the environment and /proc, so the parent never imports JAX.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Callable

from metarl import platform
from metarl.rl.configs import PPOConfig, program_key


def cache_root() -> Path:
    return Path(os.environ.get("METARL_CACHE_DIR") or Path.home() / ".cache" / "metarl")


def cache_dir() -> Path:
    return cache_root() / "baselines"


def compilation_cache_dir() -> Path:
    """JAX's persistent compilation cache, read by the trainers (never the tracers).

    Programs that repeat (baselines, the seed programs' batch at the start of every run,
    confirmations, a resumed generation) load their executable instead of compiling it:
    measured on the 2-core CPU, a CartPole program's 13.1 s compile became a 1.9 s load (a
    smoke baseline job, compile and run: 12.9 s cold, 4.7-5.2 s warm). JAX keys each entry by
    the program, the compile options, the backend and its own version. Trainers see it
    read-only; what one compiles goes to its private staging directory and is copied in by the
    parent only when it finished cleanly (evaluation/xla_cache.py), so a crashed or killed
    trainer cannot leave a partial entry.
    """
    return cache_root() / "xla"


def _digest(payload: object, length: int = 24) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:length]


def baseline_key(
    task_name: str,
    program_hash: str,
    config: PPOConfig,
    training_seed: int,
    updates: int,
    sweep: tuple[float, ...] = (),
    layout: tuple[int, ...] | None = None,
) -> str:
    """The cache key of the baseline program's run on `config` with one training seed, stopped
    after `updates` updates (a short run is the first segment of the full run, so it shares
    the config), trained in a program vmapped over `layout` (the batch's seeds, in order;
    default: the seed alone). The layout is part of the key because a seed's returns depend on
    it (evaluation/cascade.py `Evaluator.references`): a baseline is paired with candidates
    trained in exactly its layout. A run of a learning-rate sweep is keyed with the sweep's
    rates (its program's rows)."""
    payload = {
        "kind": "baseline",
        "task": task_name,
        "program": program_hash,
        "config": config.to_dict(),
        "updates": int(updates),
        "training_seed": int(training_seed),
        "layout": [int(s) for s in (layout or (training_seed,))],
        # the final return's window is the run's last 10%, wherever the run was cut into
        # segments (rl/ppo.py); baselines cached under the segment's last 10% are not read
        "window": "run",
    }
    if sweep:  # only then: unswept keys stay as they were
        payload["sweep"] = [float(lr) for lr in sweep]
    return "baseline-" + platform.evaluation_key(payload, platform.evaluation_identity(), 24)


def random_key(env_name: str) -> str:
    """The cache key of `env_name`'s random-policy return on this machine."""
    payload = {"kind": "random", "env": env_name}
    return "random-" + platform.evaluation_key(payload, platform.evaluation_identity(), 24)


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of metarl's own source files (every .py under the package, read once per
    process): what the training program's call sizes depend on besides the libraries'
    versions, so an edited trainer in a development checkout never reads sizes traced by the
    code before the edit."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def call_sizes_key(task_name: str, config: PPOConfig, n_seeds: int) -> str:
    """The cache key of the sizes the training program of `config` on `n_seeds` seeds calls
    the task's programs with (tasks/behaviour.py): they depend on the task, the config, the
    number of seeds (not their values) and metarl's code (`code_digest`); every level of an
    env family shares them (`program_key`)."""
    payload = {
        "kind": "call-sizes",
        "task": task_name,
        "config": program_key(config).to_dict(),
        "n_seeds": int(n_seeds),
        "code": code_digest(),
    }
    return "sizes-" + platform.evaluation_key(payload, platform.evaluation_identity(), 24)


def valid_sizes(data: object) -> bool:
    """`data` is call sizes as a trainer returns them: {"sizes": [[variant, "forward" | "vjp",
    [size, ...]], ...]}, every size a positive int below 2^31, at least one entry."""
    entries = data.get("sizes") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        return False
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 3):
            return False
        variant, role, sizes = entry
        if not isinstance(variant, str) or role not in ("forward", "vjp"):
            return False
        if not isinstance(sizes, list) or not all(
            type(size) is int and 0 < size < 2**31 for size in sizes
        ):
            return False
    return True


def call_sizes_dir() -> Path:
    """The call sizes' folder, beside the baselines' (their own, so that a check of the
    baselines' folder sees only baselines)."""
    return cache_root() / "call-sizes"


def _path(key: str) -> Path:
    folder = call_sizes_dir() if key.startswith("sizes-") else cache_dir()
    return folder / f"{key}.json"


def load(key: str, valid: Callable[[object], bool] | None = None) -> dict | None:
    """The entry stored under `key`, or None when missing or failing verification (its key,
    its checksum, and `valid`: default, the numbers a score is computed from are finite)."""
    try:
        entry = json.loads(_path(key).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("key") != key:
        return None
    data = entry.get("data")
    if entry.get("checksum") != _digest([key, data], 64) or not (valid or _finite_numbers)(data):
        return None
    return data


def save(key: str, data: dict) -> None:
    """Atomic write: a killed process never leaves a half-written entry behind."""
    directory = _path(key).parent
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump({"key": key, "data": data, "checksum": _digest([key, data], 64)}, handle)
    os.replace(tmp, _path(key))


def _finite_numbers(data: object) -> bool:
    """The cached numbers a score is computed from are all finite."""
    if not isinstance(data, dict):
        return False
    values = data.get("final_returns", [data.get("return")])
    return (
        isinstance(values, list)
        and bool(values)
        and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in values
        )
    )
