"""The archive: one SQLite file (WAL) holding runs, candidates, evaluations, lineage, LLM calls
and conversation messages. Every write that belongs together (a candidate, its evaluations, its
calls, its messages, and the run's resumable state) is one `BEGIN IMMEDIATE` transaction, so a
process killed at any instant leaves a consistent file, and a second process reading the file
(a leaderboard while `discover` runs) neither blocks the writer nor sees half a candidate.
"""

from __future__ import annotations

import json
import logging
import os
import socket

from sqlite_utils import Database

from metarl.archives.columns import (
    decode_outcome,
    decode_row,
    encode_row,
    evaluation_rows,
    interval_columns,
    now,
    outcome_columns,
    sum_known,
)
from metarl.archives.connection import ArchiveConnection
from metarl.archives.faults import ArchiveError
from metarl.evaluation.fidelity import RUNG_STOP
from metarl.evaluation.outcome import EVALUATOR_FAULT, Outcome
from metarl.evaluation.roles import role_matrix, summarise
from metarl.evaluation.statistics import Estimate

logger = logging.getLogger(__name__)
# columns.py's helpers and faults.py's ArchiveError, which callers import from here
__all__ = [
    "Archive",
    "ArchiveError",
    "CONFIRMATION_COLUMNS",
    "decode_outcome",
    "now",
    "outcome_columns",
    "pid_alive",
]

# what re-evaluating a candidate on more seeds adds to its row; copied along with a cached one
CONFIRMATION_COLUMNS = (
    "confirmed_fitness",
    "confirmed_fitness_low",
    "confirmed_fitness_high",
    "confirmed_heldout",
    "confirmed_heldout_low",
    "confirmed_heldout_high",
    "confirmed_seeds",
)


def _insert_evaluations(
    db: Database, outcome: Outcome, candidate_id: str, run_id: str | None, purpose: str
) -> None:
    """The outcome's `evaluations` rows (one per env scored), in the caller's transaction."""
    for record in evaluation_rows(outcome, candidate_id, run_id, purpose):
        db["evaluations"].insert(encode_row("evaluations", record))


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Archive(ArchiveConnection):
    """A metarl archive file (`must_exist=True` for commands that only read): its runs,
    candidates, evaluations, lineage, calls and messages. Opening, transactions and the
    translation of SQLite's failures are `ArchiveConnection`'s (connection.py)."""

    # -- runs -------------------------------------------------------------------------------

    def create_run(self, **fields) -> str:
        with self.transaction():
            seq = (self.query("SELECT max(seq) AS m FROM runs")[0]["m"] or 0) + 1
            run_id = f"r{seq}"
            stamp = now()
            record = {
                "id": run_id,
                "seq": seq,
                "status": "running",
                "started_at": stamp,
                "updated_at": stamp,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "candidates_count": 0,
                "elapsed_s": 0.0,
                "cost_usd": 0.0,
                "generation": 0,
            }
            record.update(fields)
            self.db["runs"].insert(encode_row("runs", record))
        return run_id

    def update_run(self, run_id: str, **fields) -> None:
        fields.setdefault("updated_at", now())
        with self.transaction():
            self.db["runs"].update(run_id, encode_row("runs", fields))

    def finish_run(self, run_id: str, status: str, reason: str, **fields) -> bool:
        """Record how a run's session ended (status, stop reason, end time and `fields`), best
        effort: a failing write is logged, never raised, since the archive stays consistent
        without it and the caller is already ending. Returns whether it was written."""
        try:
            self.update_run(run_id, status=status, stop_reason=reason, ended_at=now(), **fields)
        except ArchiveError as error:  # every SQLite error arrives as one (transaction())
            logger.error("could not record run %s as %s: %s", run_id, status, error)
            return False
        return True

    def get_run(self, run_id: str) -> dict:
        rows = self.query("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            known = [r["id"] for r in self.query("SELECT id FROM runs ORDER BY seq")]
            hint = (
                f"runs in this archive: {', '.join(known[-10:])} (all: `metarl runs`)"
                if known
                else "it has no runs: start one with `metarl discover`"
            )
            raise ArchiveError(f"no run {run_id!r} in {self.path}", hint=hint)
        return decode_row("runs", rows[0])

    def latest_run(self) -> dict | None:
        rows = self.query("SELECT * FROM runs ORDER BY seq DESC LIMIT 1")
        return decode_row("runs", rows[0]) if rows else None

    def methods(self) -> list[str]:
        """The methods (`runs.method`) this archive has runs of, sorted: the registry of methods
        is the archive itself, so a new method needs no list to be filtered on."""
        return [r["method"] for r in self.query("SELECT DISTINCT method FROM runs ORDER BY method")]

    def runs(self) -> list[dict]:
        """Every run's row, oldest first, as stored (`archives.runs.listed_runs` adds what a
        "running" row really is: live, killed or stale)."""
        return [decode_row("runs", r) for r in self.query("SELECT * FROM runs ORDER BY seq")]

    # -- candidates -------------------------------------------------------------------------

    def record_candidate(
        self,
        row: dict,
        outcome: Outcome | None,
        *,
        calls: list[dict] | None = None,
        messages: list[dict] | None = None,
        run_update: dict | None = None,
    ) -> None:
        """Write a candidate, its evaluations, lineage, LLM calls and conversation messages,
        and the run's new state, atomically."""
        row = dict(row)
        row.setdefault("created_at", now())
        calls = calls or []
        with self.transaction() as db:
            call_ids = []
            for call in calls:
                record = encode_row(
                    "calls",
                    {
                        "run_id": row.get("run_id"),
                        "candidate_id": row["id"],
                        "created_at": row["created_at"],
                        **call,
                    },
                )
                call_ids.append(db["calls"].insert(record).last_pk)
            if call_ids:
                row["call_ids"] = call_ids
                row["prompt_id"] = row["reply_id"] = call_ids[-1]
                row["prompt_tokens"] = sum_known(c.get("prompt_tokens") for c in calls)
                row["completion_tokens"] = sum_known(c.get("completion_tokens") for c in calls)
                row["cost_usd"] = sum_known(c.get("cost_usd") for c in calls)
                row["latency_s"] = sum_known(c.get("latency_s") for c in calls)
            if outcome is not None:
                row.update(outcome_columns(outcome))
                _insert_evaluations(db, outcome, row["id"], row.get("run_id"), "selection")
            db["candidates"].insert(encode_row("candidates", row))
            for position, parent in enumerate(row.get("parent_ids") or []):
                db["parents"].insert(
                    {
                        "child_id": row["id"],
                        "parent_id": parent,
                        "position": position,
                        "run_id": row.get("run_id"),
                    }
                )
            if messages:
                start = (
                    self.query(
                        "SELECT coalesce(max(seq), -1) AS m FROM messages WHERE run_id = ?",
                        (row.get("run_id"),),
                    )[0]["m"]
                    + 1
                )
                for offset, message in enumerate(messages):
                    db["messages"].insert(
                        {
                            "run_id": row.get("run_id"),
                            "seq": start + offset,
                            "role": message.get("role"),
                            "content": message.get("content"),
                            "candidate_id": row["id"],
                            "created_at": row["created_at"],
                        }
                    )
            if run_update:
                run_update = dict(run_update)
                if "candidates_count" in run_update:  # counted inside the transaction
                    run_update["candidates_count"] = self.child_count(row["run_id"])
                self.update_run(row["run_id"], **run_update)

    def record_confirmation(
        self,
        candidate_id: str,
        outcome: Outcome,
        *,
        run_id: str | None = None,
        run_update: dict | None = None,
    ) -> None:
        """An elite re-evaluated on more seeds: its confirmed scores and evaluations."""
        seeds = sorted({s for e in outcome.env_scores for s in e.seeds})
        with self.transaction() as db:
            _insert_evaluations(db, outcome, candidate_id, run_id, "confirm")
            db["candidates"].update(
                candidate_id,
                encode_row(
                    "candidates",
                    {
                        "confirmed_fitness": outcome.fitness if outcome.passed else None,
                        "confirmed_heldout": outcome.heldout if outcome.passed else None,
                        "confirmed_seeds": seeds,
                        **interval_columns(outcome, "confirmed_"),
                    },
                ),
            )
            if run_update and run_id:
                self.update_run(run_id, **run_update)

    def record_validation(
        self,
        candidate_id: str,
        outcome: Outcome,
        envs: list[str],
        *,
        aggregation: str = "best",
        run_id: str | None = None,
        run_update: dict | None = None,
    ) -> Estimate | None:
        """One validation round of a candidate (its validation envs, on fresh seeds): the
        evaluations, and the candidate's validation score recomputed over every round so far
        (IQM with its stratified-bootstrap interval; `evaluation/roles.py`).

        Args:
            candidate_id: the candidate validated.
            outcome: the round's outcome (validation-role env scores).
            envs: the suite's validation envs, in order.
            aggregation: how a swept env's learning rates combine ("best" or "mean").
            run_id, run_update: the run that validated it, and its state to save with it.

        Returns:
            The validation score over all rounds (None when no round scored every env).
        """
        with self.transaction() as db:
            _insert_evaluations(db, outcome, candidate_id, run_id, "validation")
            rows = self.role_evaluations(candidate_id, "validation")
            estimate = summarise(role_matrix(rows, envs, aggregation))
            seeds = sorted({int(s) for row in rows for s in row["seeds"]})
            db["candidates"].update(
                candidate_id,
                encode_row(
                    "candidates",
                    {
                        "validation": estimate.point if estimate else None,
                        "validation_low": estimate.low if estimate else None,
                        "validation_high": estimate.high if estimate else None,
                        "validation_seeds": seeds,
                    },
                ),
            )
            if run_update and run_id:
                self.update_run(run_id, **run_update)
        return estimate

    def record_final(
        self,
        candidate_id: str,
        outcome: Outcome,
        *,
        run_id: str | None = None,
        run_update: dict | None = None,
    ) -> None:
        """The test role re-measured on fresh seeds once selection is done (`final_heldout`):
        the reported number, not the best of the noisy draws selection made."""
        seeds = sorted({s for e in outcome.env_scores for s in e.seeds})
        low, high = outcome.heldout_ci if outcome.passed and outcome.heldout_ci else (None, None)
        with self.transaction() as db:
            _insert_evaluations(db, outcome, candidate_id, run_id, "final")
            db["candidates"].update(
                candidate_id,
                encode_row(
                    "candidates",
                    {
                        "final_heldout": outcome.heldout if outcome.passed else None,
                        "final_heldout_low": low,
                        "final_heldout_high": high,
                        "final_seeds": seeds,
                    },
                ),
            )
            if run_update and run_id:
                self.update_run(run_id, **run_update)

    def record_stability(
        self,
        candidate_id: str,
        outcome: Outcome,
        *,
        run_id: str | None = None,
        run_update: dict | None = None,
    ) -> None:
        """A stability round of a candidate (its validation envs at several times the budget,
        paired with the incumbent on fresh seeds: discovery/races.py): the evaluations, read
        back by `role_evaluations(candidate_id, "stability")`."""
        with self.transaction() as db:
            _insert_evaluations(db, outcome, candidate_id, run_id, "stability")
            if run_update and run_id:
                self.update_run(run_id, **run_update)

    def role_evaluations(self, candidate_id: str, purpose: str) -> list[dict]:
        """A candidate's full-stage evaluation rows of `purpose` (e.g. "validation"), decoded,
        in the order they were written."""
        rows = self.query(
            "SELECT env, role, lr, seeds, returns, baseline_mean, random_mean, total_timesteps "
            "FROM evaluations "
            "WHERE candidate_id = ? AND purpose = ? AND stage = 'full' ORDER BY id",
            (candidate_id, purpose),
        )
        return [decode_row("evaluations", dict(row)) for row in rows]

    def copy_confirmation(self, candidate_id: str, confirmation: dict) -> None:
        """Give a candidate the confirmation (CONFIRMATION_COLUMNS) of the same program found
        elsewhere in the archive, as `find_confirmation` or a decoded candidate row holds it.
        Joins the caller's transaction when there is one."""
        fields = {column: confirmation.get(column) for column in CONFIRMATION_COLUMNS}
        if not isinstance(fields["confirmed_seeds"], str):
            fields["confirmed_seeds"] = json.dumps(fields["confirmed_seeds"])
        with self.transaction() as db:
            db["candidates"].update(candidate_id, fields)

    def find_confirmation(self, source_hash: str, eval_key: str) -> dict | None:
        """The confirmation (CONFIRMATION_COLUMNS, as stored) of the same program evaluated under
        the same settings anywhere in this archive; None when it was never confirmed."""
        rows = self.query(
            f"SELECT {', '.join(CONFIRMATION_COLUMNS)} FROM candidates "
            "WHERE hash = ? AND eval_key = ? AND confirmed_seeds IS NOT NULL LIMIT 1",
            (source_hash, eval_key),
        )
        return rows[0] if rows else None

    def child_count(self, run_id: str) -> int:
        """How many candidates run `run_id` has archived, seed programs not counted (what its
        candidate budget counts)."""
        return self.query(
            "SELECT count(*) AS n FROM candidates WHERE run_id = ? AND is_seed = 0", (run_id,)
        )[0]["n"]

    def run_fingerprints(self, run_id: str) -> dict[str, str]:
        """Behaviour fingerprint -> the first candidate (by seq) of run `run_id` that has it,
        duplicates excluded: what the cascade compares a new candidate's behaviour with."""
        rows = self.query(
            "SELECT id, fingerprint FROM candidates WHERE run_id = ? AND fingerprint IS NOT NULL "
            "AND status != 'duplicate' ORDER BY seq",
            (run_id,),
        )
        out: dict[str, str] = {}
        for row in rows:
            out.setdefault(row["fingerprint"], row["id"])
        return out

    def run_source_hashes(self, run_id: str) -> dict[str, str]:
        """Normalised-source hash -> the first candidate (by seq) of run `run_id` with that
        program: what a new proposal is deduplicated against."""
        rows = self.query(
            "SELECT id, hash FROM candidates WHERE run_id = ? ORDER BY seq", (run_id,)
        )
        out: dict[str, str] = {}
        for row in rows:
            out.setdefault(row["hash"], row["id"])
        return out

    def passing_candidates(self, run_id: str) -> list[dict]:
        """Run `run_id`'s passing candidates (id, hash, fitness), best first by the number
        selection compares (the confirmed fitness when there is one), one per program."""
        rows = self.query(
            "SELECT id, hash, coalesce(confirmed_fitness, fitness) AS score FROM candidates "
            "WHERE run_id = ? AND status = 'passed' AND cached_from IS NULL "
            "ORDER BY score DESC, seq",
            (run_id,),
        )
        seen: set = set()
        return [r for r in rows if not (r["hash"] in seen or seen.add(r["hash"]))]

    def latest_run_of(self, task: str, method: str) -> str | None:
        """The id of the latest `method` run of `task` that has a passing candidate, or None."""
        rows = self.query(
            "SELECT r.id FROM runs r WHERE r.task = ? AND coalesce(r.method, 'discovery') = ? "
            "AND EXISTS (SELECT 1 FROM candidates c WHERE c.run_id = r.id AND "
            "c.status = 'passed') ORDER BY r.seq DESC LIMIT 1",
            (task, method),
        )
        return rows[0]["id"] if rows else None

    def candidate(self, candidate_id: str) -> dict:
        rows = self.query("SELECT * FROM candidates WHERE id = ?", (candidate_id,))
        if not rows:
            raise ArchiveError(
                f"no candidate {candidate_id!r} in {self.path}",
                hint="ids look like r1-7; see `metarl leaderboard`",
            )
        return decode_row("candidates", rows[0])

    def has_candidate(self, candidate_id: str) -> bool:
        return bool(self.query("SELECT 1 FROM candidates WHERE id = ?", (candidate_id,)))

    def resolve_candidate(self, ref: str) -> str:
        """A candidate id, or a unique prefix of its source hash."""
        if self.has_candidate(ref):
            return ref
        if len(ref) >= 4:
            rows = self.query(
                "SELECT id FROM candidates WHERE hash LIKE ? AND cached_from IS NULL "
                "AND status != 'duplicate' ORDER BY seq LIMIT 2",
                (ref + "%",),
            )
            if len(rows) == 1:
                return rows[0]["id"]
            if len(rows) > 1:
                raise ArchiveError(
                    f"{ref!r} matches several candidates", hint="give a candidate id (e.g. r1-7)"
                )
        raise ArchiveError(
            f"no candidate {ref!r} in {self.path}",
            hint="ids look like r1-7, or give a hash prefix; see `metarl leaderboard`",
        )

    def run_candidates(self, run_id: str) -> list[dict]:
        return [
            decode_row("candidates", r)
            for r in self.query("SELECT * FROM candidates WHERE run_id = ? ORDER BY seq", (run_id,))
        ]

    def find_cached(self, source_hash: str, eval_key: str) -> dict | None:
        """An earlier, real (not cached, not duplicate) evaluation of the same program under the
        same evaluation settings anywhere in this archive; never one a rung stopped (its
        verdict is that run's fidelity, which the key leaves out: archives/keys.py)."""
        rows = self.query(
            "SELECT * FROM candidates WHERE hash = ? AND eval_key = ? AND cached_from IS NULL "
            "AND status IN ('passed', 'failed') AND outcome IS NOT NULL "
            "AND coalesce(reason, '') NOT LIKE ? AND coalesce(reason, '') NOT LIKE ? "
            "ORDER BY created_at LIMIT 1",
            # an older archive's faults; a rung's stop
            (source_hash, eval_key, EVALUATOR_FAULT + "%", RUNG_STOP + "%"),
        )
        return decode_row("candidates", rows[0]) if rows else None

    def evaluations(self, candidate_id: str) -> list[dict]:
        return [
            decode_row("evaluations", r)
            for r in self.query(
                "SELECT * FROM evaluations WHERE candidate_id = ? ORDER BY id", (candidate_id,)
            )
        ]

    def calls(self, candidate_id: str) -> list[dict]:
        return [
            decode_row("calls", r)
            for r in self.query(
                "SELECT * FROM calls WHERE candidate_id = ? ORDER BY id", (candidate_id,)
            )
        ]

    def messages(self, run_id: str) -> list[dict]:
        return self.query(
            "SELECT role, content, candidate_id FROM messages WHERE run_id = ? ORDER BY seq",
            (run_id,),
        )

    def children(self, candidate_id: str) -> list[str]:
        return [
            r["child_id"]
            for r in self.query("SELECT child_id FROM parents WHERE parent_id = ?", (candidate_id,))
        ]

    def parents(self, candidate_id: str) -> list[str]:
        return [
            r["parent_id"]
            for r in self.query(
                "SELECT parent_id FROM parents WHERE child_id = ? ORDER BY position",
                (candidate_id,),
            )
        ]
