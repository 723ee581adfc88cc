"""The keys under which archived evaluations may be shared: every method's candidate rows carry
them, so a program scored the same way by any method or run is recognised as the same result.

The key is `platform.evaluation_key` over the task, the cascade settings that change a verdict
or a score, and the run's `platform.evaluation_identity()` (recorded as the rows' `versions`):
the same builder and identity as the baseline cache's keys. Discovery, ES, distillation,
symbolic regression and the GRPO reward all build their rows through `rows.candidate_row` or
`discovery.records.RowMaker`, which call `eval_settings_key` and nothing else.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Mapping

from metarl.evaluation.settings import CascadeSettings, plan_runs
from metarl.platform import evaluation_key
from metarl.rl.suites import get_suite

# Sandbox limits: they decide whether an evaluation finishes in time and memory, never the
# numbers it produces, so runs with different limits share results (as timeouts always did).
# `unsafe_no_sandbox` is not among them: a score earned outside the sandbox is not shared.
LIMIT_FIELDS = (
    "timeout_s",
    "memory_mb",
    "cpu_s",
    "max_file_mb",
    "trace_timeout_s",
    "train_timeout_factor",
    "train_timeout_floor_s",
)


def eval_settings_key(task: str, settings: Any, identity: Mapping[str, Any]) -> str:
    """Everything that determines an evaluation's scores; equal keys may share results.

    The training seeds enter as their count and, when pinned, their values: drawn seeds are
    a fresh sample of the same protocol (recorded with each score), pinned ones a different
    protocol. The secret seed pool and the probe inputs' seed never enter (the pool must not
    leak, and probes decide pass/fail, not scores); nor do the sandbox limits (LIMIT_FIELDS).

    Args:
        task: the task's name.
        settings: the CascadeSettings (or their dict) the program is scored with.
        identity: the run's `platform.evaluation_identity()`.

    Returns:
        16 hex digits.

    Raises:
        ValueError: `identity` is not a whole evaluation identity.
    """
    fields = dataclasses.asdict(settings) if dataclasses.is_dataclass(settings) else dict(settings)
    known = set(defaults())
    whole = CascadeSettings(**{**defaults(), **{k: v for k, v in fields.items() if k in known}})
    # nor does the near-duplicate threshold: whom a candidate duplicates is a run's own matter
    for volatile in (*LIMIT_FIELDS, "seed_pool", "probe_seed", "behaviour_novelty"):
        fields.pop(volatile, None)
    if not fields.get("train_envs"):  # keys from before curricula stay as they were
        fields.pop("train_envs", None)
    # nor do the rungs (evaluation/fidelity.py): a program that passes them scores exactly as
    # at full fidelity, and one they stopped is never shared (`Archive.find_cached`)
    for rung_field in ("rungs", "rung_bar", "rung_confidence"):
        fields.pop(rung_field, None)
    # a score's window is the run's last 10% wherever the run is cut (rl/ppo.py); scores
    # archived under the segment's last 10% are not those of today's trainer
    fields["score_window"] = "run"
    fields["seeds_pinned"] = bool(fields.get("seed_values"))
    if isinstance(fields.get("suite"), str):  # the suite's environments by role, not its name
        fields["suite_roles"] = get_suite(fields["suite"]).roles()
        if fields.get("train_envs"):  # a curriculum's draw replaces the train role
            fields["suite_roles"]["train"] = list(fields["train_envs"])
        # which roles are scored, as the plan has them: asking for a role the suite does not
        # have (validation on `smoke`) changes no score, so it changes no key
        for asked in ("train", "validation", "heldout"):
            fields.pop(asked, None)
        fields["scored_roles"] = sorted({entry.role for entry in plan_runs(whole)})
    return evaluation_key({"task": task, "settings": fields}, identity, 16)


def defaults() -> dict:
    """CascadeSettings' fields at their defaults (a stored settings dict may lack newer ones)."""
    return dataclasses.asdict(CascadeSettings())


def suite_config_hash(suite_name: str, timesteps: int | None) -> str:
    suite = get_suite(suite_name)
    hashes = [suite.config(env, timesteps).config_hash() for env in suite.all_envs]
    return hashlib.sha256("|".join(hashes).encode()).hexdigest()[:16]
