"""The archive: schema, migrations, transactional writes, round-trips, queries, export."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from metarl.archives import SCHEMA_VERSION, Archive, ArchiveError
from metarl.archives.incumbents import run_summary
from metarl.archives.queries import export_csv, export_json, leaderboard, lineage
from metarl.archives.store import decode_outcome
from metarl.evaluation.outcome import EnvScore, Outcome


def _outcome(fitness: float | None = 1.1, passed: bool = True, stage: str = "full", reason=None):
    envs = []
    if passed:
        envs = [
            EnvScore(
                "CartPole-v1",
                [0, 1],
                8192,
                [200.0, 180.0],
                190.0,
                10.0,
                fitness,
                170.0,
                20.0,
                curve_steps=list(range(0, 200, 2)),
                curve=[float(i) for i in range(100)],
                compile_s=5.0,
                run_s=2.0,
                steps_per_s=8000.0,
            ),
            EnvScore(
                "Catch-bsuite", [0, 1], 8192, [0.5, 0.4], 0.45, 0.05, 0.7, 0.6, -0.5, heldout=True
            ),
        ]
    return Outcome(
        passed=passed,
        stage=stage,
        reason=reason,
        env_scores=envs,
        fitness=fitness if passed else None,
        heldout=0.7 if passed else None,
        fingerprint="fp" + str(fitness),
        timings={"probes": 1.0, "full": 7.0, "total": 8.5},
    )


def _row(run_id: str, seq: int, **extra) -> dict:
    row = {
        "id": f"{run_id}-{seq}",
        "run_id": run_id,
        "seq": seq,
        "task": "drift",
        "suite": "smoke",
        "hash": f"h{seq}",
        "code": f"def drift(ratio, advantage, epsilon):\n    return {seq} * ratio\n",
        "name": f"cand{seq}",
        "thought": "t",
        "parent_ids": [],
        "generation": 0,
        "island": 0,
        "is_seed": 0,
        "proposer": "mutation:constant",
        "operator": "constant",
        "seeds": [0, 1],
        "total_timesteps": 8192,
        "eval_key": "k",
        "versions": {"jax": "0.9.2"},
        "device": "cpu",
    }
    row.update(extra)
    return row


@pytest.fixture
def archive(tmp_path):
    with Archive(tmp_path / "a.db") as store:
        yield store


def test_create_schema_wal_and_version(archive):
    assert archive.schema_version == SCHEMA_VERSION
    assert archive.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = set(archive.db.table_names())
    assert {"runs", "candidates", "evaluations", "messages", "calls", "parents"} <= tables
    indexes = {i.name for i in archive.db["candidates"].indexes}
    assert any("fitness" in name for name in indexes)
    assert archive.integrity_check() == "ok"


def test_candidate_round_trip(archive):
    run = archive.create_run(
        task="drift", suite="smoke", proposer="mutation", config={"a": 1}, state={"x": [1, 2]}
    )
    assert run == "r1"
    outcome = _outcome(1.25)
    archive.record_candidate(
        _row(run, 0, is_seed=1, name="ppo_clip"),
        outcome,
        calls=[
            {
                "model": "m",
                "prompt": [{"role": "user", "content": "hi"}],
                "reply": "code",
                "prompt_tokens": 10,
                "completion_tokens": 5,
                "cost_usd": None,
                "latency_s": 0.5,
            }
        ],
        messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        run_update={"state": {"x": [3]}, "candidates_count": 1},
    )
    row = archive.candidate("r1-0")
    assert row["status"] == "passed" and row["fitness"] == pytest.approx(1.25)
    assert row["heldout"] == pytest.approx(0.7)
    assert row["seeds"] == [0, 1] and row["versions"] == {"jax": "0.9.2"}
    assert row["prompt_id"] == row["reply_id"] == row["call_ids"][0]
    assert row["cost_usd"] is None  # unknown cost stays unknown, not zero
    assert row["prompt_tokens"] == 10
    back = decode_outcome(row)
    assert back.fitness == outcome.fitness and back.env_scores[0].returns == [200.0, 180.0]
    assert len(back.env_scores[0].curve) <= 64  # downsampled
    evs = archive.evaluations("r1-0")
    assert {e["env"] for e in evs} == {"CartPole-v1", "Catch-bsuite"}
    assert archive.messages(run)[1]["content"] == "yo"
    assert archive.get_run(run)["state"] == {"x": [3]}
    assert archive.calls("r1-0")[0]["prompt"][0]["content"] == "hi"


def test_failure_and_duplicate_status(archive):
    run = archive.create_run(task="drift", suite="smoke")
    archive.record_candidate(_row(run, 0), Outcome.failure("probes", "NaN at ratio 0"))
    archive.record_candidate(_row(run, 1), Outcome.failure("probes", "same", duplicate_of="r1-0"))
    archive.record_candidate(
        _row(run, 2, code=None, hash=None), Outcome.failure("propose", "no code")
    )
    statuses = [archive.candidate(f"r1-{i}")["status"] for i in range(3)]
    assert statuses == ["failed", "duplicate", "no_code"]
    assert archive.candidate("r1-0")["reason"] == "NaN at ratio 0"
    assert run_summary(archive, run)["stopped_at"] == {"probes": 2, "propose": 1}


def test_transaction_is_atomic(archive):
    run = archive.create_run(task="drift", suite="smoke")
    with pytest.raises(RuntimeError):
        with archive.transaction():
            archive.record_candidate(_row(run, 0), _outcome(1.0))
            raise RuntimeError("killed mid-write")
    assert not archive.has_candidate("r1-0")
    assert archive.query("SELECT count(*) AS n FROM evaluations")[0]["n"] == 0
    # a failing insert inside record_candidate rolls back its evaluations too
    archive.record_candidate(_row(run, 0), _outcome(1.0))
    with pytest.raises(sqlite3.IntegrityError):
        archive.record_candidate(_row(run, 0), _outcome(1.0))  # duplicate primary key
    assert archive.query("SELECT count(*) AS n FROM evaluations")[0]["n"] == 2


def test_leaderboard_lineage_and_cache(archive):
    run = archive.create_run(task="drift", suite="smoke")
    archive.record_candidate(_row(run, 0, is_seed=1, name="ppo_clip"), _outcome(1.0))
    archive.record_candidate(_row(run, 1, parent_ids=["r1-0"], generation=1), _outcome(1.3))
    archive.record_candidate(_row(run, 2, parent_ids=["r1-1", "r1-0"], generation=2), _outcome(0.9))
    archive.record_candidate(
        _row(run, 3, parent_ids=["r1-2"], generation=3),
        Outcome.failure("short", "far below the seed"),
    )
    archive.record_confirmation("r1-1", _outcome(1.2), run_id=run)
    board = leaderboard(archive, run_id=run)
    assert [r.id for r in board.rows] == ["r1-1", "r1-0", "r1-2"]  # failures never ranked
    assert board.rows[0].confirmed == pytest.approx(1.2)
    assert board.envs == ["CartPole-v1"]  # held-out envs are not training columns
    assert board.rows[1].is_seed
    # latest run by default; unknown run is a clear error
    assert [r.id for r in leaderboard(archive).rows] == [r.id for r in board.rows]
    with pytest.raises(ArchiveError, match="no run 'r9'"):
        leaderboard(archive, run_id="r9")
    tree = lineage(archive, "r1-3")
    assert tree["parents"][0]["id"] == "r1-2"
    grand = tree["parents"][0]["parents"]
    assert [g["id"] for g in grand] == ["r1-1", "r1-0"]
    assert grand[0]["parents"][0]["id"] == "r1-0" and grand[0]["parents"][0]["repeat"] is False
    assert grand[1]["repeat"] is True  # reached twice: expanded once
    assert archive.children("r1-0") == ["r1-1", "r1-2"]
    assert archive.find_cached("h1", "k")["id"] == "r1-1"
    assert archive.find_cached("h1", "other-key") is None
    assert archive.resolve_candidate("r1-2") == "r1-2"
    with pytest.raises(ArchiveError):
        archive.resolve_candidate("nope")


def test_several_runs_share_a_file_and_all_runs_dedups(archive):
    r1 = archive.create_run(task="drift", suite="smoke")
    r2 = archive.create_run(task="drift", suite="smoke")
    assert (r1, r2) == ("r1", "r2")
    archive.record_candidate(_row(r1, 0, is_seed=1), _outcome(1.0))
    archive.record_candidate(_row(r2, 0, is_seed=1, cached_from="r1-0"), _outcome(1.0))
    archive.record_candidate(_row(r2, 1, hash="other"), _outcome(1.5))
    board = leaderboard(archive, all_runs=True)
    assert [r.id for r in board.rows] == ["r2-1", "r1-0"]


def test_export_json_and_csv(archive):
    run = archive.create_run(task="drift", suite="smoke", config={"budget": 3})
    archive.record_candidate(_row(run, 0), _outcome(1.0))
    archive.record_candidate(_row(run, 1), Outcome.failure("static", "bad import"))
    data = json.loads(export_json(archive, run))
    assert data["run"]["config"] == {"budget": 3}
    assert len(data["candidates"]) == 2 and data["candidates"][0]["evaluations"]
    rows = list(csv.DictReader(io.StringIO(export_csv(archive, run))))
    assert rows[0]["score:CartPole-v1"] and rows[1]["reason"] == "bad import"


def test_migration_from_empty_and_refuses_foreign_or_newer(tmp_path):
    path = tmp_path / "old.db"
    sqlite3.connect(path).close()  # an empty SQLite file: version 0
    with Archive(path) as store:
        assert store.schema_version == SCHEMA_VERSION
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE users (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(ArchiveError, match="not a metarl archive"):
        Archive(foreign)
    newer = tmp_path / "newer.db"
    conn = sqlite3.connect(newer)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(ArchiveError, match="newer metarl"):
        Archive(newer)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(ArchiveError, match="not a usable SQLite archive"):
        Archive(junk)
    with pytest.raises(ArchiveError, match="no archive at"):
        Archive(tmp_path / "missing.db", must_exist=True)


def test_migration_keeps_data(tmp_path):
    """Re-running the migrations over an archive with data (as an upgrade would) drops nothing."""
    path = tmp_path / "a.db"
    with Archive(path) as store:
        run = store.create_run(task="drift", suite="smoke")
        store.record_candidate(_row(run, 0), _outcome(1.0))
        store.conn.execute("PRAGMA user_version = 0")
    with Archive(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.candidate("r1-0")["fitness"] == pytest.approx(1.0)


def test_reader_process_during_writes(tmp_path):
    """A second process reads while this one writes in long transactions: never blocked,
    never sees half a candidate."""
    path = tmp_path / "a.db"
    store = Archive(path)
    run = store.create_run(task="drift", suite="smoke")
    reader = textwrap.dedent(f"""
        import sqlite3, time
        conn = sqlite3.connect({str(path)!r}, timeout=0.2)
        seen = 0
        for _ in range(60):
            # one statement is one read snapshot (two SELECTs could straddle a commit)
            c, e = conn.execute(
                "SELECT (SELECT count(*) FROM candidates), (SELECT count(*) FROM evaluations)"
            ).fetchone()
            assert e == 2 * c, (c, e)
            seen = max(seen, c)
            time.sleep(0.01)
        print(seen)
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", reader], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    for seq in range(30):
        with store.transaction():
            store.record_candidate(_row(run, seq), _outcome(1.0))
            import time

            time.sleep(0.02)  # hold the write lock: the reader must not block on it
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert store.integrity_check() == "ok"
    store.close()


def test_an_incumbent_that_children_outscored_on_train_says_no_race_crowned_them(archive):
    """A run whose races left the seed in place (lost, or void: a race round that scored
    nothing) must not say that no child scored above it."""
    from metarl.archives.incumbents import run_incumbent

    run = archive.create_run(
        task="drift", suite="smoke", proposer="mutation", config={"confirm": True}, state={}
    )
    for seq, fitness in ((0, 2.0), (1, 2.5), (2, 1.5)):
        archive.record_candidate(_row(run, seq, is_seed=int(seq == 0)), _outcome(fitness))
    archive.update_run(run, best_id=f"{run}-0")
    incumbent = run_incumbent(archive, run)
    assert (incumbent.id, incumbent.outscored) == (f"{run}-0", 1)
    assert incumbent.why().startswith("1 candidate scored above it on train, but no validation")
    archive.update_run(run, best_id=f"{run}-1")
    assert "no child scored above it" in run_incumbent(archive, run).why()
