"""The on-disk cache of baseline runs and random-policy returns.

A candidate's score is normalised against the task's baseline seed trained with the *same*
seeds, budget and config, so that a baseline is needed for every (env, budget, seeds, config)
a suite uses. Training it costs as much as a candidate; it is computed once and kept in a
JSON file per key under the cache directory (METARL_CACHE_DIR, default ~/.cache/metarl).
The key includes library versions and the JAX backend, since returns differ across them.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Sequence

from metarl.evaluators.configs import PPOConfig
from metarl.evaluators.training import EnvRun


def cache_dir() -> Path:
    root = os.environ.get("METARL_CACHE_DIR") or Path.home() / ".cache" / "metarl"
    return Path(root) / "baselines"


def library_versions() -> dict:
    import gymnax
    import jax
    import jaxlib

    import metarl

    return {
        "metarl": metarl.__version__,
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "gymnax": getattr(gymnax, "__version__", "unknown"),
        "backend": jax.default_backend(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),  # optimisation flags change the last bits
    }


def baseline_key(
    task_name: str, seed_source_hash: str, config: PPOConfig, seeds: Sequence[int]
) -> str:
    blob = json.dumps(
        {
            "task": task_name,
            "seed": seed_source_hash,
            "config": config.to_dict(),
            "seeds": [int(s) for s in seeds],
            "versions": library_versions(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _path(key: str) -> Path:
    return cache_dir() / f"{key}.json"


def load(key: str) -> EnvRun | None:
    path = _path(key)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        for derived in ("mean", "std", "steps_per_s"):
            data.pop(derived, None)
        return EnvRun(**data)
    except (OSError, ValueError, TypeError):
        return None  # a corrupt entry is recomputed, never trusted


def save(key: str, run: EnvRun) -> None:
    """Atomic write: a killed process never leaves a half-written entry behind."""
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(run.to_dict(), handle)
    os.replace(tmp, _path(key))


def get_or_train(task, config: PPOConfig, seeds: Sequence[int]) -> tuple[EnvRun, bool]:
    """The task's baseline on `config` and `seeds`: (run, was_cached). Trains on a miss.

    Runs trusted seed code in this process; callers that must stay responsive run it inside
    the sandbox worker like any other training run.
    """
    from metarl.evaluators.training import run_training
    from metarl.tasks.candidate import load_function, source_hash

    seed = task.baseline()
    key = baseline_key(task.name, source_hash(seed.source), config, seeds)
    cached = load(key)
    if cached is not None:
        return cached, True
    run = run_training(config, task.plug(load_function(seed.source, task.function_name)), seeds)
    save(key, run)
    return run, False
