"""The keys under which archived evaluations may be shared: every method's candidate rows carry
them, so a program scored the same way by any method or run is recognised as the same result."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from metarl.rl.suites import get_suite


def eval_settings_key(task: str, settings: Any, versions: dict, device: str) -> str:
    """Everything that determines an evaluation's scores; equal keys may share results.

    The training seeds enter as their count and, when pinned, their values: drawn seeds are
    a fresh sample of the same protocol (recorded with each score), pinned ones a different
    protocol. The secret seed pool and the probe inputs' seed never enter (the pool must not
    leak, and probes decide pass/fail, not scores).
    """
    fields = dataclasses.asdict(settings) if dataclasses.is_dataclass(settings) else dict(settings)
    for volatile in ("timeout_s", "memory_mb", "seed_pool", "probe_seed"):
        fields.pop(volatile, None)
    fields["seeds_pinned"] = bool(fields.get("seed_values"))
    blob = json.dumps(
        {"task": task, "settings": fields, "versions": versions, "device": device},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def suite_config_hash(suite_name: str, timesteps: int | None) -> str:
    suite = get_suite(suite_name)
    hashes = [suite.config(env, timesteps).config_hash() for env in (*suite.envs, *suite.heldout)]
    return hashlib.sha256("|".join(hashes).encode()).hexdigest()[:16]
