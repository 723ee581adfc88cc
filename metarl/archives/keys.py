"""The keys under which archived evaluations may be shared: every method's candidate rows carry
them, so a program scored the same way by any method or run is recognised as the same result."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from metarl.rl.suites import get_suite


def eval_settings_key(task: str, settings: Any, versions: dict, device: str) -> str:
    """Everything that determines an evaluation's scores; equal keys may share results."""
    fields = dataclasses.asdict(settings) if dataclasses.is_dataclass(settings) else dict(settings)
    for volatile in ("timeout_s", "memory_mb"):
        fields.pop(volatile, None)
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
