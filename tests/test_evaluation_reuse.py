"""A program the archive has scored under an evaluation key is not trained again by any
method: the ES export, a distilled or symbolic student and the GRPO reward each reuse the
earlier evaluation (their rows say `cached_from`), as discovery always did
(test_evaluation_identity.py). Each method's own code path runs; where it would train, an
evaluator stands that fails the test if asked to (nothing may be trained)."""

from __future__ import annotations

import json

import jax

from metarl.archives.derived import (
    Student,
    Teacher,
    derive,
    load_teacher,
    teacher_settings,
)
from metarl.archives.keys import eval_settings_key
from metarl.archives.reuse import archived_score, evaluate_or_reuse
from metarl.archives.rows import candidate_row
from metarl.archives.store import Archive
from metarl.evaluation.cascade import Evaluator
from metarl.evaluation.outcome import EnvScore, Outcome
from metarl.platform import device_description, evaluation_identity
from metarl.tasks import get_task

TIMESTEPS = 4096
PINNED = [0]
PPO = get_task("drift").seed_program("ppo_clip").source
# PPO-clip's drift with other names: another source, so another program (another hash)
OTHER = """
def drift(ratio, advantage, epsilon):
    clipped = jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)
    return jax.nn.relu((ratio - clipped) * advantage)
"""


class RefusesToTrain:
    """Stands where the cascade would train: being asked to is the failure under test."""

    def evaluate_batch(self, sources, task, **kwargs):
        raise AssertionError(f"asked to train {len(sources)} program(s) the archive had scored")


class SamplesButRefusesToTrain(Evaluator):
    """The real sandboxed evaluator for sampling a teacher; training a student fails the test."""

    def evaluate_batch(self, sources, task, **kwargs):
        raise AssertionError(f"asked to train {len(sources)} program(s) the archive had scored")


def scored_outcome(fitness: float) -> Outcome:
    """A passed evaluation at the shared protocol, as the cascade returns one."""
    score = EnvScore(
        env="CartPole-v1",
        seeds=list(PINNED),
        total_timesteps=TIMESTEPS,
        returns=[100.0 * fitness],
        mean=100.0 * fitness,
        std=0.0,
        normalised=fitness,
        baseline_mean=100.0,
        random_mean=20.0,
    )
    return Outcome(
        passed=True, stage="full", env_scores=[score], fitness=fitness, seeds_pinned=True
    )


def teacher() -> Teacher:
    """The teacher (and the protocol) every method below scores at: smoke, seed 0 pinned."""
    return Teacher("t", PPO, "drift", "smoke", 1, TIMESTEPS, None, list(PINNED))


def archive_scored(archive: Archive, code: str, method: str, fitness: float, settings=None) -> str:
    """Archive `code` as scored once by a run of `method` (at the teacher's protocol without
    held-out envs unless `settings` say otherwise); its id."""
    settings = settings or teacher_settings(teacher(), heldout=False)
    run_id = archive.create_run(task="drift", suite="smoke", method=method)
    row = candidate_row(
        run_id=run_id,
        seq=1,
        task="drift",
        method=method,
        code=code,
        settings=settings,
        total_timesteps=TIMESTEPS,
        versions=evaluation_identity(),
        device=device_description(),
        name=method,
        thought="",
        parent_ids=[],
        generation=1,
        proposer=method,
        operator=method,
    )
    archive.record_candidate(row, scored_outcome(fitness))
    return row["id"]


def test_evaluate_or_reuse_trains_only_what_the_archive_has_not_scored(tmp_path):
    sent = []

    def evaluate(sources):
        sent.extend(sources)
        return [Outcome.failure("probes", "trained here") for _ in sources]

    with Archive(tmp_path / "metarl.db") as archive:
        earlier = archive_scored(archive, PPO, "discovery", 1.0)
        key = archive.candidate(earlier)["eval_key"]
        scored = evaluate_or_reuse(archive, evaluate, [OTHER, PPO, OTHER], key)
        other_key = eval_settings_key(
            "drift", teacher_settings(teacher(), short_run_threshold=0.9), evaluation_identity()
        )
        assert archived_score(archive, PPO, other_key) is None  # another protocol: no reuse
        own_run = archive.candidate(earlier)["run_id"]
        assert archived_score(archive, PPO, key, exclude_run=own_run) is None  # a run's own repeat
        assert archived_score(archive, PPO, key).cached_from == earlier
    assert sent == [OTHER, OTHER]  # one batch of the programs it had not scored
    assert [s.cached_from for s in scored] == [None, earlier, None]
    assert scored[1].outcome.fitness == 1.0 and scored[0].outcome.stage == "probes"


def test_an_es_export_the_archive_has_scored_is_reused_not_trained(tmp_path):
    from metarl.blackbox.config import ESConfig
    from metarl.blackbox.es import ESRun

    config = ESConfig(
        task="drift", suite="smoke", timesteps=TIMESTEPS, seed_values=list(PINNED), heldout=False
    )
    with Archive(tmp_path / "metarl.db") as archive:
        run = ESRun(config, archive)
        run.run_id = archive.create_run(task="drift", suite="smoke", method="es")
        mean = run.family.zero_params(run.config.hidden)
        es_state = run.strategy.init(jax.random.PRNGKey(0), mean, run.strategy.default_params)
        # an earlier ES run exported the same mean (its title comment differs: same program)
        code = run.family.source(run.mean_params(es_state), "ES mean of an earlier run")
        earlier = archive_scored(archive, code, "es", 1.0)
        cid = run.export(RefusesToTrain(), es_state)
        row, first = archive.candidate(cid), archive.candidate(earlier)
    assert row["cached_from"] == earlier and row["eval_key"] == first["eval_key"]
    assert row["status"] == "passed" and row["fitness"] == 1.0


def test_a_student_the_archive_has_scored_is_reused_not_trained(tmp_path, metarl_cache):
    with Archive(tmp_path / "metarl.db") as archive:
        teacher_id = archive_scored(archive, PPO, "discovery", 1.0)
        # another method scored the student's program at the teacher's protocol
        settings = teacher_settings(load_teacher(archive, teacher_id))
        earlier = archive_scored(archive, OTHER, "symbolic", 0.9, settings)

        def fit(teacher: Teacher, samples) -> Student:
            return Student(OTHER, "student", "", {"fit": "fixed"})

        derived = derive(
            archive,
            teacher_id,
            "distil",
            fit,
            points=8,
            epsilon=0.2,
            config={},
            evaluator_factory=lambda settings: SamplesButRefusesToTrain(settings, workers=1),
        )
        row, first = archive.candidate(derived.candidate_id), archive.candidate(earlier)
    assert row["cached_from"] == earlier and row["eval_key"] == first["eval_key"]
    assert row["fitness"] == 0.9 and row["parent_ids"] == [teacher_id]


def test_the_grpo_reward_reuses_another_runs_evaluation_and_archives_where_from(tmp_path):
    from metarl.grpo.rewards import CascadeReward, KnownPrograms
    from metarl.grpo.settings import GRPOSettings
    from metarl.grpo.train import ProposerTraining

    settings = GRPOSettings(
        task="drift", suite="smoke", seed_values=list(PINNED), timesteps=TIMESTEPS
    )
    with Archive(tmp_path / "metarl.db") as archive:
        training = ProposerTraining(settings, archive)
        earlier = archive_scored(archive, OTHER, "es", 1.25)
        assert archive.candidate(earlier)["eval_key"] == eval_settings_key(
            "drift", training.cascade, training.versions
        )  # the GRPO run's protocol is this one
        training.run_id = archive.create_run(task="drift", suite="smoke", method="grpo")
        reward = CascadeReward(
            RefusesToTrain(),
            training.task,
            KnownPrograms(),
            group=1,
            record=training.record,
            archived=training.archived,
        )
        reply = json.dumps({"thought": "t", "name": "clip", "code": OTHER})
        verdicts, evaluated = reward.judge([reply])
        training.record(verdicts, {}, step=0, phase="base")
        (row,) = archive.run_candidates(training.run_id)
    assert evaluated == 0 and verdicts[0].cached_from == earlier
    assert verdicts[0].reward == 1.25 and verdicts[0].label == "scored"
    assert row["cached_from"] == earlier and row["fitness"] == 1.25
