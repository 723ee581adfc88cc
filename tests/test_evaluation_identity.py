"""One evaluation identity: the same program scored the same way by discover, ES, distillation
and the GRPO reward carries one evaluation key, so it is trained once and found by the others;
the baseline cache keys on the same identity; old archives' keys are marked, never shared.

No training: every method's rows are built by its own row path (the discovery loop's RowMaker,
ES's settings and identity with the shared `candidate_row`, distillation's `record_derived`,
the GRPO recorder) with the protocol each method would use at one setting (the smoke suite,
4096 steps, training seed 0 pinned, no held-out envs). The one evaluation they share is a
recorded outcome; the discovery loop's own cache lookup (`_settled`) then reuses it.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
from sqlite_utils import Database

from metarl import platform
from metarl.archives.derived import Teacher, record_derived, teacher_settings
from metarl.archives.keys import eval_settings_key
from metarl.archives.rows import candidate_row
from metarl.archives.schema import LEGACY_KEY_PREFIX, MIGRATIONS
from metarl.archives.store import Archive
from metarl.discovery import records
from metarl.discovery.config import DiscoverConfig
from metarl.discovery.loop import DiscoveryLoop
from metarl.discovery.proposers.base import Proposal
from metarl.discovery.state import Slot
from metarl.evaluation import baseline_cache
from metarl.evaluation.fidelity import RUNG_STOP, rung_reason
from metarl.evaluation.outcome import EnvScore, Outcome
from metarl.evaluation.settings import CascadeSettings
from metarl.rl.suites import get_suite
from metarl.tasks import get_task
from metarl.tasks.candidate import source_hash

PROGRAM = get_task("drift").seed_program("ppo_clip").source
TIMESTEPS = 4096
PINNED = [0]


def scored_outcome() -> Outcome:
    """A passed evaluation of PROGRAM at the shared protocol, as the cascade would return it."""
    score = EnvScore(
        env="CartPole-v1",
        seeds=list(PINNED),
        total_timesteps=TIMESTEPS,
        returns=[120.0],
        mean=120.0,
        std=0.0,
        normalised=1.0,
        baseline_mean=120.0,
        random_mean=20.0,
    )
    return Outcome(passed=True, stage="full", env_scores=[score], fitness=1.0, seeds_pinned=True)


def discovery_row(archive: Archive) -> tuple[DiscoveryLoop, dict]:
    """The discovery loop (not run) and its row for a child proposing PROGRAM."""
    config = DiscoverConfig(
        task="drift", suite="smoke", seed_values=list(PINNED), timesteps=TIMESTEPS
    )
    loop = DiscoveryLoop(archive, config, proposer=None)
    loop.run_id = "disc"
    loop.rows = records.RowMaker(loop.run_id, "drift", loop.config, loop.versions, loop.device)
    slot = Slot(
        slot=0,
        id="disc-1",
        seq=1,
        island=0,
        parent_ids=[],
        inspiration_ids=[],
        rng_seed=0,
        proposal=Proposal(code=PROGRAM, name="ppo_clip", proposer="mutation"),
    )
    settings = records.cascade_settings(loop.config, "child")
    return loop, loop.rows.child(settings, slot, generation=1, proposer_name="mutation")


def es_row(archive: Archive) -> dict:
    """An ES export of PROGRAM, built from a real ES run's settings and identity."""
    from metarl.blackbox.config import ESConfig
    from metarl.blackbox.es import ESRun

    config = ESConfig(
        task="drift",
        suite="smoke",
        timesteps=TIMESTEPS,
        seed_values=list(PINNED),
        heldout=False,
    )
    run = ESRun(config, archive)
    return candidate_row(
        run_id="es",
        seq=1,
        task="drift",
        method="es",
        code=PROGRAM,
        settings=run.settings,
        total_timesteps=run.config.timesteps,
        versions=run.versions,
        device=run.device,
        name="es-g1",
        thought="",
        parent_ids=[],
        generation=1,
        proposer="evosax Open_ES",
        operator="es-mean",
    )


def distil_row(archive: Archive) -> dict:
    """A distilled student whose program is PROGRAM, archived by distillation's own writer."""
    teacher = Teacher("t", PROGRAM, "drift", "smoke", 1, TIMESTEPS, None, list(PINNED))
    settings = teacher_settings(teacher, heldout=False)
    _, cid = record_derived(
        archive,
        method="distil",
        teacher=teacher,
        code=PROGRAM,
        outcome=Outcome.failure("static", "not evaluated here"),
        settings=settings,
        name="student",
        thought="",
        meta={},
        config={},
        seconds=0.0,
    )
    return archive.candidate(cid)


def grpo_row(archive: Archive) -> dict:
    """A GRPO completion whose program is PROGRAM, archived by the reward's recorder."""
    from metarl.grpo.rewards import Verdict
    from metarl.grpo.settings import GRPOSettings
    from metarl.grpo.train import ProposerTraining

    settings = GRPOSettings(
        task="drift", suite="smoke", seed_values=list(PINNED), timesteps=TIMESTEPS
    )
    training = ProposerTraining(settings, archive)
    training.run_id = archive.create_run(task="drift", suite="smoke", method="grpo")
    verdict = Verdict("reply", PROGRAM, Outcome.failure("static", "not evaluated"), -0.75, "x")
    training.record([verdict], {}, step=0, phase="base")
    return archive.candidate(verdict.candidate_id)


@pytest.fixture(scope="module")
def method_rows(tmp_path_factory) -> dict[str, dict]:
    """Each method's row for PROGRAM, written by its own row path (none trained; the archive
    they were written to holds placeholder outcomes and is not used again)."""
    path = tmp_path_factory.mktemp("identity") / "metarl.db"
    with Archive(path) as archive:
        return {
            "discover": discovery_row(archive)[1],
            "es": es_row(archive),
            "distil": distil_row(archive),
            "grpo": grpo_row(archive),
        }


def test_discover_es_distil_and_the_grpo_reward_give_one_program_one_key(method_rows):
    identity = platform.evaluation_identity()
    assert {row["hash"] for row in method_rows.values()} == {source_hash(PROGRAM)}
    assert len({row["eval_key"] for row in method_rows.values()}) == 1, {
        method: row["eval_key"] for method, row in method_rows.items()
    }
    for method, row in method_rows.items():
        assert row["versions"] == identity, method  # every method records the one identity


def test_a_program_another_method_scored_is_found_and_not_trained_again(method_rows, tmp_path):
    with Archive(tmp_path / "metarl.db") as archive:
        es = {**method_rows["es"], "run_id": archive.create_run(task="drift", method="es")}
        es["id"] = f"{es['run_id']}-1"
        archive.record_candidate(es, scored_outcome())  # ES trained and scored it, once
        for method in ("discover", "distil", "grpo"):
            row = method_rows[method]
            hit = archive.find_cached(row["hash"], row["eval_key"])
            assert hit is not None and hit["id"] == es["id"], method
        # the discovery loop's own lookup: its child reuses ES's evaluation, nothing is trained
        loop, child = discovery_row(archive)
        slot = Slot(0, child["id"], 1, 0, [], [], 0, Proposal(code=PROGRAM))
        outcome = loop._settled(slot, child, child["eval_key"])
        assert outcome is not None and outcome.fitness == 1.0
        assert child["cached_from"] == es["id"]


def test_a_verdict_a_rung_gave_is_never_shared(method_rows, tmp_path):
    """Rungs are no part of the key (a program that passes them scores as at full fidelity),
    so a program they stopped must not be found by a full-fidelity lookup."""
    with Archive(tmp_path / "metarl.db") as archive:
        row = {**method_rows["discover"], "run_id": archive.create_run(task="drift")}
        row["id"] = f"{row['run_id']}-1"
        reason = rung_reason(
            "CartPole-v1", 1024, 1 / 3, [20.0, 21.0], [90.0, 95.0], 20.0, 0.5, 0.95, "b"
        )
        stopped = Outcome(passed=False, stage="short", reason=reason)
        archive.record_candidate(row, stopped)
        assert archive.candidate(row["id"])["reason"].startswith(RUNG_STOP)
        assert archive.find_cached(row["hash"], row["eval_key"]) is None
        # the same program stopped by the short run's threshold is a shared verdict
        other = {**row, "id": f"{row['run_id']}-2", "seq": row["seq"] + 1}
        archive.record_candidate(other, Outcome(passed=False, stage="short", reason="short run: x"))
        assert archive.find_cached(row["hash"], row["eval_key"])["id"] == other["id"]


def test_the_baseline_cache_keys_on_the_same_identity_as_the_archive(monkeypatch):
    config = get_suite("smoke").config("CartPole-v1", TIMESTEPS)
    settings = CascadeSettings(suite="smoke", seeds=1, seed_values=[0], total_timesteps=4096)

    def keys() -> tuple[str, str, str]:
        identity = platform.evaluation_identity()
        baseline = baseline_cache.baseline_key("drift", "h", config, 0, config.num_updates)
        return (
            baseline,
            baseline_cache.random_key("CartPole-v1"),
            eval_settings_key("drift", settings, identity),
        )

    before = keys()
    assert keys() == before  # a pure function of the identity
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=2")
    flags = keys()
    monkeypatch.setattr(platform, "compute_device", lambda proc="": "cpu: another CPU x64")
    device = keys()
    for changed in (flags, device):
        assert all(new != old for new, old in zip(changed, before))
    assert all(new != old for new, old in zip(device, flags))


def test_a_key_built_on_bare_library_versions_is_refused():
    settings = CascadeSettings(suite="smoke", seeds=1)
    with pytest.raises(ValueError, match="not an evaluation identity"):
        eval_settings_key("drift", settings, platform.library_versions())


def test_sandbox_limits_share_a_key_but_an_unsandboxed_score_does_not():
    identity = platform.evaluation_identity()
    base = CascadeSettings(suite="smoke", seeds=1, seed_values=[0])
    key = eval_settings_key("drift", base, identity)
    same = CascadeSettings(
        suite="smoke",
        seeds=1,
        seed_values=[0],
        timeout_s=30,
        trace_timeout_s=5,
        train_timeout_factor=3,
        cpu_s=10,
        seed_pool=[5, 6],
        probe_seed=7,
    )
    assert eval_settings_key("drift", same, identity) == key
    # asking for roles `smoke` does not have (validation, test) changes no score, nor the key
    no_roles = CascadeSettings(suite="smoke", seeds=1, seed_values=[0], heldout=False)
    all_roles = CascadeSettings(suite="smoke", seeds=1, seed_values=[0], validation=True)
    assert eval_settings_key("drift", no_roles, identity) == key
    assert eval_settings_key("drift", all_roles, identity) == key
    for differs in (
        CascadeSettings(suite="smoke", seeds=1, seed_values=[0], unsafe_no_sandbox=True),
        CascadeSettings(suite="smoke", seeds=1, seed_values=[1]),
        CascadeSettings(suite="smoke", seeds=1),  # drawn, not pinned
        CascadeSettings(suite="smoke", seeds=1, seed_values=[0], lr_sweep="3"),
    ):
        assert eval_settings_key("drift", differs, identity) != key
    classic = CascadeSettings(suite="classic", seeds=1, seed_values=[0])
    scored_roles = {
        eval_settings_key("drift", CascadeSettings(**{**vars(classic), **roles}), identity)
        for roles in ({}, {"heldout": False}, {"validation": True}, {"train": False})
    }
    assert len(scored_roles) == 4  # on a suite that has every role, each choice is a key


def test_gpu_hosts_are_told_apart_by_model_and_driver(tmp_path, monkeypatch):
    monkeypatch.setattr(platform, "backend", lambda: "cuda")
    (tmp_path / "version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build\n"
    )
    for bus, model in (("0000:01:00.0", "NVIDIA H100 80GB HBM3"), ("0000:02:00.0", "NVIDIA A100")):
        (tmp_path / "gpus" / bus).mkdir(parents=True)
        (tmp_path / "gpus" / bus / "information").write_text(f"Model: \t\t {model}\nIRQ: 1\n")
    assert platform.compute_device(str(tmp_path)) == (
        "cuda: NVIDIA A100, NVIDIA H100 80GB HBM3; driver 550.54.15"
    )
    assert platform.compute_device(str(tmp_path / "absent")) == (
        "cuda: GPU model unknown; driver unknown"
    )


def _version_4_archive(path, eval_key: str) -> None:
    """An archive as metarl wrote it at schema version 4, holding one scored candidate."""
    db = Database(sqlite3.connect(path))
    for migration in MIGRATIONS[:4]:
        migration(db)
    outcome = scored_outcome()
    db["candidates"].insert(
        {
            "id": "old-1",
            "run_id": "old",
            "seq": 1,
            "task": "drift",
            "hash": source_hash(PROGRAM),
            "code": PROGRAM,
            "status": "passed",
            "stage": "full",
            "fitness": 1.0,
            "eval_key": eval_key,
            "outcome": json.dumps(outcome.to_dict()),
            "created_at": "2024-01-01T00:00:00+00:00",
        }
    )
    db.execute("PRAGMA user_version = 4")
    db.conn.commit()
    db.conn.close()


def test_an_old_archive_keys_are_marked_legacy_and_never_shared_with_new_rows(tmp_path):
    path = tmp_path / "old.db"
    _version_4_archive(path, "0123456789abcdef")
    with Archive(path) as archive:
        row = archive.candidate("old-1")
        assert row["eval_key"] == LEGACY_KEY_PREFIX + "0123456789abcdef"
        assert row["legacy_eval_key"] == "0123456789abcdef"  # kept, for the record
        new_key = eval_settings_key(
            "drift",
            CascadeSettings(suite="smoke", seeds=1, seed_values=[0]),
            platform.evaluation_identity(),
        )
        assert archive.find_cached(row["hash"], new_key) is None
        assert archive.find_cached(row["hash"], "0123456789abcdef") is None
        # old rows still group with each other as they did
        assert archive.find_cached(row["hash"], row["eval_key"])["id"] == "old-1"
