"""The rows a report reads: light, whole-run queries that stay fast on 10k-candidate runs.

A run's report needs every candidate's fate and scores (for the fitness plot and the funnel) but
the code, outcome JSON and curves of only a handful (the top candidates). So the whole-run
queries select narrow column lists and decode only what they select; the heavy columns are read
per candidate id. Measured with benchmarks/report.py on 10k synthetic candidates (RESULTS.md).
"""

from __future__ import annotations

import json

from metarl.archives.columns import decode_row
from metarl.archives.store import Archive

# what the fitness plot, the funnel, the leaderboards and the comparison need of every candidate
POINT_COLUMNS = (
    "id",
    "run_id",
    "seq",
    "task",
    "suite",
    "name",
    "status",
    "stage",
    "reason",
    "fitness",
    "fitness_low",
    "fitness_high",
    "confirmed_fitness",
    "heldout",
    "heldout_low",
    "heldout_high",
    "confirmed_heldout",
    "confirmed_heldout_low",
    "confirmed_heldout_high",
    # the test role re-measured on fresh seeds after selection, and the validation role: what
    # the train-vs-test scatter draws beside the train score (report/generalisation.py)
    "final_heldout",
    "final_heldout_low",
    "final_heldout_high",
    "final_seeds",
    "validation",
    "validation_low",
    "validation_high",
    "method",
    "proposer",
    "operator",
    "is_seed",
    "generation",
    "seeds",
    "total_timesteps",
    "eval_key",
    "hash",
    "cached_from",
    "created_at",
)
CALL_COLUMNS = (
    "id",
    "candidate_id",
    "model",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "latency_s",
    "error",
    "created_at",
)


def run_points(archive: Archive, run_id: str) -> list[dict]:
    """Every candidate of run `run_id` in proposal order, narrow columns only.

    Args:
        archive: the archive holding the run.
        run_id: the run.

    Returns:
        One dict of POINT_COLUMNS per candidate, `seeds` and `final_seeds` decoded into lists
        ([] when unrecorded).
    """
    rows = archive.query(
        f"SELECT {', '.join(POINT_COLUMNS)} FROM candidates WHERE run_id = ? ORDER BY seq",
        (run_id,),
    )
    for row in rows:
        for column in ("seeds", "final_seeds"):
            row[column] = json.loads(row[column]) if row[column] else []
    return rows


def run_calls(archive: Archive, run_id: str) -> list[dict]:
    """Every LLM call of run `run_id` in the order made: model, tokens, cost, latency, error
    (not the prompt and reply text)."""
    return archive.query(
        f"SELECT {', '.join(CALL_COLUMNS)} FROM calls WHERE run_id = ? ORDER BY id", (run_id,)
    )


def full_evaluations(archive: Archive, candidate_ids: list[str]) -> dict[str, list[dict]]:
    """candidate id -> its full-budget selection evaluations (training and held-out envs, with
    curves), decoded; the ids that have none map to []."""
    out: dict[str, list[dict]] = {cid: [] for cid in candidate_ids}
    if not candidate_ids:
        return out
    marks = ",".join("?" * len(candidate_ids))
    for row in archive.query(
        f"SELECT * FROM evaluations WHERE candidate_id IN ({marks}) AND purpose = 'selection' "
        "AND stage = 'full' ORDER BY id",
        candidate_ids,
    ):
        out[row["candidate_id"]].append(decode_row("evaluations", row))
    return out


def program_rows(archive: Archive, candidate_ids: list[str]) -> dict[str, dict]:
    """candidate id -> {id, name, code, thought, operator, parent_ids, fitness} for the ids
    that exist."""
    if not candidate_ids:
        return {}
    marks = ",".join("?" * len(candidate_ids))
    rows = archive.query(
        "SELECT id, name, code, thought, operator, proposer, parent_ids, fitness, "
        f"confirmed_fitness, is_seed FROM candidates WHERE id IN ({marks})",
        candidate_ids,
    )
    return {row["id"]: decode_row("candidates", row) for row in rows}


def evaluated_program(archive: Archive, source_hash: str, eval_key: str) -> str | None:
    """The id of a passed, really evaluated candidate with this source and evaluation key
    anywhere in the archive (the earliest), or None: how a report finds the baseline program's
    curves for a run that did not evaluate its seeds itself (an ES run)."""
    rows = archive.query(
        "SELECT id FROM candidates WHERE hash = ? AND eval_key = ? AND status = 'passed' "
        "AND cached_from IS NULL ORDER BY created_at, seq LIMIT 1",
        (source_hash, eval_key),
    )
    return rows[0]["id"] if rows else None


def run_ids(archive: Archive, task: str | None = None, suite: str | None = None) -> list[str]:
    """Every run's id in start order, of `task`/`suite` when given."""
    where, params = [], []
    for column, value in (("task", task), ("suite", suite)):
        if value:
            where.append(f"{column} = ?")
            params.append(value)
    sql = "SELECT id FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
    return [row["id"] for row in archive.query(sql + " ORDER BY seq", params)]
