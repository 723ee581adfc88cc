"""The archive's schema, its version, and the migrations between versions.

The schema version lives in SQLite's `PRAGMA user_version` (written in the same transaction as
the migration, so a killed migration leaves the old version and the old tables intact).
Migrations only ever add: tables, columns, indexes. They never drop data, so an archive written
by an older metarl opens in a newer one with every row still there; the one value a migration
rewrites (version 5's `eval_key`) keeps its original beside it.

Tables (see DESIGN.md, "Archive"):

- `runs`: one row per discovery run: task, suite, proposer, config, status, versions, budgets
  spent, best candidate, and the loop `state` (JSON) that `resume` continues from.
- `candidates`: one row per proposed program (seeds included): what reproduces it (code, hash,
  parents, generation, island, proposer, seeds, budget, evaluation key, versions, device),
  its fate (status, stage, reason), its scores (fitness, held-out, confirmation) and costs.
- `evaluations`: one row per (candidate, environment, purpose): returns per seed, normalised
  score, downsampled learning curve, timings.
- `parents`: lineage edges (child, parent, position), indexed both ways.
- `calls`: one row per LLM round-trip (prompt, reply, model, tokens, cost, latency, error);
  candidates point at theirs through `prompt_id`/`reply_id`/`call_ids`.
- `messages`: the conversation of a conversation-mode run, in order.
- `guidance`: the versions of a discovery run's evolving prompt guidance (version 9).
- `external_evaluations`: scores of a program in another project's harness (DiscoGen's), beside
  ours (version 10).

Version 2 adds the 95% bootstrap intervals over training seeds: `candidates.fitness_low`/
`fitness_high`, `heldout_low`/`heldout_high` and their `confirmed_*` counterparts;
`evaluations.normalised_low`/`normalised_high` and `evaluations.published` (JSON: source label
-> score normalised against that source's published PPO return). Version 3 adds each run's and
candidate's `method` and the candidate's method `meta`; version 4 `evaluations.curve_std`;
version 5 marks the evaluation keys written before the single evaluation identity (`_v5`);
version 6 adds the validation role (`_v6`) and the run's evaluation protocol; version 7
`evaluations.positive_value_loss` (`_v7`); version 8 `evaluations.adaptation` and
`evaluations.scratch` (`_v8`: JSON, a meta-RL run's mean adaptation curve and its from-scratch
PPO reference); version 9 the `guidance` table (`_v9`: each version of a discovery run's
evolving "what worked / what failed" prompt section; a child's `meta` names the version it saw);
version 10 the `external_evaluations` table (`_v10`: a program scored in another harness).
"""

from __future__ import annotations

from typing import Callable

from sqlite_utils import Database

SCHEMA_VERSION = 10


def _v1(db: Database) -> None:
    db["runs"].create(
        {
            "id": str,
            "seq": int,
            "task": str,
            "suite": str,
            "proposer": str,
            "model": str,
            "mode": str,
            "seed": int,
            "config": str,  # JSON: every discover option, as resolved
            "config_hash": str,
            "status": str,  # running | finished | stopped | interrupted | failed
            "stop_reason": str,
            "error": str,
            "started_at": str,
            "updated_at": str,
            "ended_at": str,
            "versions": str,  # JSON: metarl, jax, jaxlib, gymnax, backend
            "device": str,
            "host": str,
            "pid": int,
            "budget_candidates": int,
            "max_time_s": float,
            "max_cost_usd": float,
            "candidates_count": int,
            "elapsed_s": float,
            "cost_usd": float,
            "generation": int,
            "best_id": str,
            "best_fitness": float,
            "state": str,  # JSON: the loop's resumable state
        },
        pk="id",
        if_not_exists=True,
    )
    db["candidates"].create(
        {
            "id": str,
            "run_id": str,
            "seq": int,
            "task": str,
            "suite": str,
            "hash": str,
            "code": str,
            "name": str,
            "thought": str,
            "parent_ids": str,  # JSON list
            "generation": int,
            "island": int,
            "slot": int,
            "is_seed": int,
            "proposer": str,
            "operator": str,
            "prompt_id": int,
            "reply_id": int,
            "call_ids": str,  # JSON list
            "status": str,  # passed | failed | duplicate | no_code | fault (the evaluator's)
            "stage": str,  # static | probes | short | full | propose | dedup
            "reason": str,
            "fitness": float,
            "heldout": float,
            "confirmed_fitness": float,
            "confirmed_heldout": float,
            "confirmed_seeds": str,  # JSON list
            "fingerprint": str,
            "duplicate_of": str,
            "cached_from": str,
            "seeds": str,  # JSON list of training seeds
            "total_timesteps": int,  # per-environment budget of the full run
            "eval_key": str,  # hash of everything that determines the scores
            "config_hash": str,  # hash of the PPO configs of the suite at this budget
            "versions": str,  # JSON
            "device": str,
            "timings": str,  # JSON: stage -> seconds
            "eval_s": float,
            "warnings": str,  # JSON list
            "outcome": str,  # JSON: the full Outcome (curves downsampled)
            "prompt_tokens": int,
            "completion_tokens": int,
            "cost_usd": float,
            "latency_s": float,
            "created_at": str,
        },
        pk="id",
        if_not_exists=True,
    )
    db["evaluations"].create(
        {
            "id": int,
            "candidate_id": str,
            "run_id": str,
            "purpose": str,  # selection | confirm | validation | stability | final
            "env": str,
            "stage": str,  # short | full
            "heldout": int,
            "seeds": str,
            "total_timesteps": int,
            "returns": str,
            "mean": float,
            "std": float,
            "normalised": float,
            "baseline_mean": float,
            "random_mean": float,
            "curve_steps": str,
            "curve": str,
            "compile_s": float,
            "run_s": float,
            "steps_per_s": float,
            "created_at": str,
        },
        pk="id",
        if_not_exists=True,
    )
    db["parents"].create(
        {"child_id": str, "parent_id": str, "position": int, "run_id": str},
        pk=("child_id", "position"),
        if_not_exists=True,
    )
    db["calls"].create(
        {
            "id": int,
            "run_id": str,
            "candidate_id": str,
            "model": str,
            "prompt": str,  # JSON list of chat messages
            "reply": str,
            "prompt_tokens": int,
            "completion_tokens": int,
            "cost_usd": float,
            "latency_s": float,
            "error": str,
            "created_at": str,
        },
        pk="id",
        if_not_exists=True,
    )
    db["messages"].create(
        {
            "id": int,
            "run_id": str,
            "seq": int,
            "role": str,
            "content": str,
            "candidate_id": str,
            "created_at": str,
        },
        pk="id",
        if_not_exists=True,
    )
    indexes = [
        ("runs", ["status"], False),
        ("runs", ["seq"], False),
        ("candidates", ["run_id", "seq"], True),
        ("candidates", ["run_id", "fitness"], False),
        ("candidates", ["task", "suite", "fitness"], False),
        ("candidates", ["hash", "eval_key"], False),
        ("candidates", ["run_id", "fingerprint"], False),
        ("candidates", ["run_id", "hash"], False),
        ("evaluations", ["candidate_id"], False),
        ("parents", ["parent_id"], False),
        ("calls", ["candidate_id"], False),
        ("calls", ["run_id"], False),
        ("messages", ["run_id", "seq"], False),
    ]
    for table, columns, unique in indexes:
        db[table].create_index(columns, unique=unique, if_not_exists=True)


def _add_columns(db: Database, table: str, columns: dict[str, type]) -> None:
    """Add the columns the table lacks (a re-run migration finds them already there)."""
    existing = set(db[table].columns_dict)
    for name, kind in columns.items():
        if name not in existing:
            db[table].add_column(name, kind)


def _v2(db: Database) -> None:
    """Bootstrap intervals over seeds, and scores against published references."""
    _add_columns(
        db,
        "candidates",
        {
            f"{prefix}{score}_{end}": float
            for prefix in ("", "confirmed_")
            for score in ("fitness", "heldout")
            for end in ("low", "high")
        },
    )
    _add_columns(
        db,
        "evaluations",
        {"normalised_low": float, "normalised_high": float, "published": str},
    )


def _v3(db: Database) -> None:
    """The meta-learning method of each run and candidate (discovery, es, distil, symbolic),
    and each candidate's method metadata (ES fitness, fit error, expression: never a rank)."""
    _add_columns(db, "runs", {"method": str})
    _add_columns(db, "candidates", {"method": str, "meta": str})
    for table in ("runs", "candidates"):
        db.execute(f"UPDATE {table} SET method = 'discovery' WHERE method IS NULL")
    db["candidates"].create_index(["method"], if_not_exists=True)


def _v4(db: Database) -> None:
    """The seed spread of each learning curve (std over training seeds at each point), drawn
    as a band by `metarl report`; NULL for evaluations written before it was recorded."""
    _add_columns(db, "evaluations", {"curve_std": str})


LEGACY_KEY_PREFIX = "legacy-"


def _v5(db: Database) -> None:
    """Mark every evaluation key written before the single evaluation identity as legacy.

    Before version 5, discovery keyed its rows on the library versions alone and ES,
    distillation, symbolic and GRPO rows on versions + backend + XLA flags, both together with
    the host's description. Those keys cannot be recomputed honestly under the new scheme
    (`platform.evaluation_identity()`, archives/keys.py): a row records neither its complete
    cascade settings nor, for discovery rows, the backend and XLA flags it was scored with.
    So each old key `k` becomes `legacy-k`, and `k` itself is kept in the new column
    `candidates.legacy_eval_key`. What that does:

    - a new evaluation never reuses an old one (`find_cached`, `find_confirmation`) and the
      all-runs leaderboard never merges an old row with a new one: new keys are 16 hex digits
      and never start with "legacy-";
    - old rows keep grouping with each other exactly as they did (same prefix, same old key),
      so an old run's leaderboard, report and baseline lookup read as before, and a resumed
      old run's old rows still find each other's confirmations;
    - the mark is visible wherever the key is shown (`metarl candidate`).

    It runs once per archive, in the transaction that sets version 5 (store.py's `_migrate`),
    so before any row keyed the new way exists; it rewrites no other column.
    """
    _add_columns(db, "candidates", {"legacy_eval_key": str})
    db.execute(
        "UPDATE candidates SET legacy_eval_key = eval_key, eval_key = ? || eval_key "
        "WHERE eval_key IS NOT NULL AND legacy_eval_key IS NULL",
        (LEGACY_KEY_PREFIX,),
    )


def _v6(db: Database) -> None:
    """The validation role (rl/suites.py): each evaluation's `role` (train | validation |
    test; older rows: test when held out, else train) and swept learning rate `lr` (NULL:
    unswept), a candidate's validation score (the IQM
    over every validation round it got, with its stratified-bootstrap interval and the seeds
    it saw) and test score re-measured on fresh seeds after selection (`final_heldout*`), and
    the run's evaluation `protocol` (evaluation/protocols.py)."""
    _add_columns(db, "evaluations", {"role": str, "lr": float})
    db.execute(
        "UPDATE evaluations SET role = CASE WHEN heldout = 1 THEN 'test' ELSE 'train' END "
        "WHERE role IS NULL"
    )
    _add_columns(
        db,
        "candidates",
        {
            "validation": float,
            "validation_low": float,
            "validation_high": float,
            "validation_seeds": str,  # JSON list: every seed of its validation rounds
            "final_heldout": float,
            "final_heldout_low": float,
            "final_heldout_high": float,
            "final_seeds": str,  # JSON list
        },
    )
    _add_columns(db, "runs", {"protocol": str})


def _v7(db: Database) -> None:
    """Each evaluation's positive value loss (Prioritized Level Replay, Jiang et al. 2021): the
    mean over seeds of mean max(GAE advantage, 0) over the run's last 10% of updates, how much
    the candidate still had to learn on that environment, which a curriculum ranks levels by;
    NULL for evaluations written before it was recorded."""
    _add_columns(db, "evaluations", {"positive_value_loss": float})


def _v8(db: Database) -> None:
    """Each evaluation's adaptation curve (JSON list): for a meta-RL run, the mean over seeds
    of the return on held-out tasks at each episode of an RL² trial or after each of MAML's
    inner gradient steps, the curve that says whether the learner adapts at all, which its
    final return alone cannot; NULL for runs without one (PPO) and rows written before it.
    Beside it `scratch` (JSON list, same points): PPO trained from scratch with the same
    experience on the same held-out tasks (rl/scratch.py), the curve's paired reference."""
    _add_columns(db, "evaluations", {"adaptation": str, "scratch": str})


def _v9(db: Database) -> None:
    """The `guidance` table: one row per version of a discovery run's evolving guidance (the
    prompt's "what worked / what failed" section, rewritten every few generations from the
    run's archive: discovery/guidance.py), keyed by (run, version), with the generation after
    which it was written, its text and its source ("rule" or "llm:<model>"). A resumed run
    reads its latest version here instead of writing it again. Each child records the version
    its proposal saw in `candidates.meta` (`{"guidance": N}`)."""
    db["guidance"].create(
        {
            "run_id": str,
            "version": int,
            "generation": int,
            "text": str,
            "source": str,
            "created_at": str,
        },
        pk=("run_id", "version"),
        if_not_exists=True,
    )


def _v10(db: Database) -> None:
    """The `external_evaluations` table: one row per time a program was scored in another
    project's harness (today DiscoGen's `run_main.py`, metarl/discogen/harness.py), kept beside
    our own evaluations rather than in them: its protocol (seeds, rates, evaluation, budget) is
    not ours, so its numbers never enter fitness, selection or leaderboards. A row names the
    program by its source `hash` (a file that was never archived as a candidate still has one;
    an archived candidate with the same code finds it) and by `candidate_id` when it was
    evaluated as one; `protocol` (JSON) is everything the score depends on besides the
    program, `games` (JSON list) the candidate's and the harness's base module's return per
    game on the same seeds and their ratio."""
    db["external_evaluations"].create(
        {
            "id": str,
            "hash": str,
            "candidate_id": str,
            "task": str,
            "harness": str,  # "discogen"
            "release": str,  # the harness's version, e.g. "1.3.0"
            "side": str,  # the harness's split: "train" | "test"
            "protocol": str,  # JSON
            "status": str,  # passed | failed
            "stage": str,
            "reason": str,
            "fitness": float,  # mean over games of candidate / base
            "games": str,  # JSON list of {env, candidate, candidate_std, base, base_std, ...}
            "seconds": float,
            "isolation": str,
            "versions": str,  # JSON: metarl's
            "host": str,
            "created_at": str,
        },
        pk="id",
        if_not_exists=True,
    )
    db["external_evaluations"].create_index(["hash"], if_not_exists=True)
    db["external_evaluations"].create_index(["candidate_id"], if_not_exists=True)


# MIGRATIONS[i] takes an archive from version i to version i + 1. Append only; never drop.
MIGRATIONS: list[Callable[[Database], None]] = [_v1, _v2, _v3, _v4, _v5, _v6, _v7, _v8, _v9, _v10]
assert len(MIGRATIONS) == SCHEMA_VERSION
