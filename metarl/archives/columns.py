"""How a value becomes an archive column and back: JSON columns, non-finite floats stored as
NULL, credentials redacted, curves downsampled, and an Outcome spread over a candidate row's
columns and its per-environment evaluation rows. Kept apart from the Archive class (store.py)
so the row shapes are read in one place, by the store and by the queries alike.
"""

from __future__ import annotations

import json
import logging
import math
from datetime import datetime, timezone

from metarl.evaluation.outcome import Outcome, evaluator_fault
from metarl.evaluation.text import redact_config

logger = logging.getLogger(__name__)

MAX_CURVE_POINTS = 64
JSON_COLUMNS = {
    "runs": {"config", "versions", "state"},
    "candidates": {
        "parent_ids",
        "call_ids",
        "confirmed_seeds",
        "validation_seeds",
        "final_seeds",
        "seeds",
        "versions",
        "timings",
        "warnings",
        "outcome",
        "meta",
    },
    "evaluations": {
        "seeds",
        "returns",
        "curve_steps",
        "curve",
        "curve_std",
        "published",
        "adaptation",
        "scratch",
    },
    "calls": {"prompt"},
}
# columns that may quote a URL a user gave (a run's options, an error text): stored without its
# credentials, whoever writes them (the real value serves the request only)
REDACTED_COLUMNS = {"runs": {"config", "error", "stop_reason"}, "calls": {"error"}}


def now() -> str:
    """The current UTC time as the archive stamps it (ISO 8601, whole seconds)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _finite(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def dumps(value) -> str | None:
    """`value` as a JSON column (sorted keys, non-finite floats as null); None stays None."""
    if value is None:
        return None
    return json.dumps(_finite(value), sort_keys=True)


def downsample(
    steps: list, values: list, *more: list, limit: int = MAX_CURVE_POINTS
) -> tuple[list, ...]:
    """At most `limit` evenly spaced points of a curve (first and last kept): its steps, its
    values and any other series measured at the same points (an empty series stays empty)."""
    n = len(values)
    if n <= limit:
        return (list(steps), list(values), *(list(m) for m in more))
    index = sorted({round(i * (n - 1) / (limit - 1)) for i in range(limit)})
    return (
        [steps[i] for i in index if i < len(steps)],
        [values[i] for i in index],
        *([m[i] for i in index if i < len(m)] for m in more),
    )


def decode_row(table: str, row: dict | None) -> dict | None:
    """A stored row of `table` with its JSON columns parsed (None stays None).

    Args:
        table: the table the row is from (which columns hold JSON).
        row: the row as SQLite returns it.

    Returns:
        A new dict; a JSON column that does not parse is left as its text, and logged.
    """
    if row is None:
        return None
    row = dict(row)
    for column in JSON_COLUMNS.get(table, ()):
        if isinstance(row.get(column), str):
            try:
                row[column] = json.loads(row[column])
            except ValueError as error:
                logger.warning(
                    "%s row %s: column %s is not JSON (%s); kept as text",
                    table,
                    row.get("id"),
                    column,
                    error,
                )
    return row


def encode_row(table: str, record: dict) -> dict:
    """`record`'s values as `table` stores them: redacted, JSON-encoded, non-finite as None.

    Args:
        table: the table the record goes to.
        record: column -> value.

    Returns:
        A new dict of the stored values.
    """
    out = {}
    for key, value in record.items():
        if key in REDACTED_COLUMNS.get(table, ()) and value is not None:
            value = redact_config(value)
        if key in JSON_COLUMNS.get(table, ()) and value is not None and not isinstance(value, str):
            value = dumps(value)
        elif isinstance(value, float) and not math.isfinite(value):
            value = None
        out[key] = value
    return out


def sum_known(values) -> float | None:
    """Sum of the known values; None when none is known (unknown cost is not zero)."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def interval_columns(outcome: Outcome, prefix: str = "") -> dict:
    """The fitness and held-out intervals as `{prefix}fitness_low` ... columns (None when the
    outcome did not pass or has no interval)."""
    columns = {}
    for score, interval in (("fitness", outcome.fitness_ci), ("heldout", outcome.heldout_ci)):
        low, high = interval if outcome.passed and interval else (None, None)
        columns[f"{prefix}{score}_low"] = low
        columns[f"{prefix}{score}_high"] = high
    return columns


def outcome_columns(outcome: Outcome) -> dict:
    """The candidate-row columns an Outcome fills: status, stage, scores, timings, the outcome."""
    data = outcome.to_dict()
    for env in data.get("env_scores", []):
        env["curve_steps"], env["curve"], env["curve_std"] = downsample(
            env.get("curve_steps") or [], env.get("curve") or [], env.get("curve_std") or []
        )
    if outcome.passed:
        status = "passed"
    elif evaluator_fault(outcome):  # says nothing about the candidate: never reused as a verdict
        status = "fault"
    elif outcome.duplicate_of:
        status = "duplicate"
    elif outcome.stage == "propose":
        status = "no_code"
    else:
        status = "failed"
    timings = outcome.timings or {}
    eval_s = sum(v for v in timings.values() if isinstance(v, (int, float))) if timings else None
    if "total" in timings:
        eval_s = timings["total"]
    # the training seed values it was scored on, once it trained (pinned ones are in the row)
    seeds = {"seeds": outcome.env_scores[0].seeds} if outcome.env_scores else {}
    # an outcome that scored the validation role itself (an ES export, evaluated on every
    # role at once) fills the validation columns a discovery run's races fill later
    validation = {}
    if outcome.passed and outcome.validation is not None:
        low, high = outcome.validation_ci or (None, None)
        scored = [s for s in outcome.env_scores if s.role == "validation"]
        validation = {
            "validation": outcome.validation,
            "validation_low": low,
            "validation_high": high,
            "validation_seeds": list(scored[0].seeds) if scored else None,
        }
    return {
        **seeds,
        **validation,
        "status": status,
        "stage": outcome.stage,
        "reason": outcome.reason,
        "fitness": outcome.fitness if outcome.passed else None,
        "heldout": outcome.heldout if outcome.passed else None,
        **interval_columns(outcome),
        "fingerprint": outcome.fingerprint,
        "duplicate_of": outcome.duplicate_of,
        "timings": timings,
        "eval_s": eval_s,
        "warnings": outcome.warnings,
        "outcome": data,
    }


def evaluation_rows(
    outcome: Outcome, candidate_id: str, run_id: str | None, purpose: str
) -> list[dict]:
    """One `evaluations` row per environment the outcome scored, curves downsampled.

    Args:
        outcome: the scored outcome.
        candidate_id: the candidate it scores.
        run_id: the run that evaluated it.
        purpose: "selection" (the cascade's verdict), "confirm" (a re-evaluation),
            "validation" (a validation round), "stability" (a race winner's validation envs at
            several times the budget) or "final" (the test role on fresh seeds).

    Returns:
        The rows, not yet encoded.
    """
    rows = []
    stamp = now()
    for env in outcome.env_scores:
        steps, curve, spread = downsample(env.curve_steps, env.curve, env.curve_std)
        rows.append(
            {
                "candidate_id": candidate_id,
                "run_id": run_id,
                "purpose": purpose,
                "env": env.env,
                "stage": env.stage,
                "heldout": int(bool(env.heldout)),
                "role": env.role,
                "lr": env.lr,
                "seeds": env.seeds,
                "total_timesteps": env.total_timesteps,
                "returns": env.returns,
                "mean": env.mean,
                "std": env.std,
                "normalised": env.normalised,
                "normalised_low": env.normalised_ci[0] if env.normalised_ci else None,
                "normalised_high": env.normalised_ci[1] if env.normalised_ci else None,
                "published": env.published or None,
                "baseline_mean": env.baseline_mean,
                "random_mean": env.random_mean,
                "curve_steps": steps,
                "curve": curve,
                "curve_std": spread or None,
                "positive_value_loss": env.positive_value_loss,
                # JSON list (encode_row); None: no curve (the column stays NULL)
                "adaptation": env.adaptation or None,
                "scratch": env.scratch or None,
                "compile_s": env.compile_s,
                "run_s": env.run_s,
                "steps_per_s": env.steps_per_s,
                "created_at": stamp,
            }
        )
    return rows


def decode_outcome(row: dict) -> Outcome | None:
    """The Outcome a candidate row stores, or None when it has none."""
    data = row.get("outcome")
    if isinstance(data, str):
        data = json.loads(data)
    if not data:
        return None
    return Outcome.from_dict(data)
