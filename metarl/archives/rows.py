"""The candidate row every method writes: the columns that say what was scored, how, where and
by what, built in one place so an ES export, a distilled student and a GRPO completion carry the
same keys as a discovery child and share cached evaluations with it."""

from __future__ import annotations

from metarl.archives.keys import eval_settings_key, suite_config_hash
from metarl.evaluation.settings import CascadeSettings
from metarl.tasks.candidate import source_hash


def candidate_row(
    *,
    run_id: str,
    seq: int,
    task: str,
    method: str,
    code: str | None,
    settings: CascadeSettings,
    total_timesteps: int | None,
    versions: dict,
    device: str,
    name: str,
    thought: str,
    parent_ids: list[str],
    generation: int,
    proposer: str,
    operator: str,
    meta: dict | None = None,
) -> dict:
    """The archive row of candidate `{run_id}-{seq}` of a `method` run.

    Args:
        run_id, seq: the run and the candidate's position in it (the id is `{run_id}-{seq}`).
        task, method: the task's name and the method's (`discovery`, `es`, `grpo`, ...).
        code: the candidate's source, or None when the method produced none.
        settings: the cascade settings it is (or would have been) scored with.
        total_timesteps: the per-environment budget as the run was asked for (None: the
            suite's own).
        versions: the run's `platform.evaluation_identity()` (the evaluation key is built
            on it; a bare version list raises ValueError).
        device: where it was scored, for people (`platform.device_description()`).
        name, thought, parent_ids, generation, proposer, operator: what the leaderboard and
            the lineage show.
        meta: the method's own record (ES generation, fit errors, GRPO step and checkpoint).

    Returns:
        A row for `Archive.record_candidate`.
    """
    return {
        "id": f"{run_id}-{seq}",
        "run_id": run_id,
        "seq": seq,
        "task": task,
        "suite": settings.suite,
        "method": method,
        "hash": source_hash(code) if code else None,
        "code": code,
        "name": name,
        "thought": thought,
        "parent_ids": list(parent_ids),
        "generation": generation,
        "is_seed": 0,
        "proposer": proposer,
        "operator": operator,
        "seeds": list(settings.seed_values or []),  # pinned; else set once trained
        "total_timesteps": total_timesteps,
        "eval_key": eval_settings_key(task, settings, versions),
        "config_hash": suite_config_hash(settings.suite, total_timesteps),
        "versions": versions,
        "device": device,
        "meta": meta or {},
    }
