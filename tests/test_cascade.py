"""The cascade end to end: every seed passes it, PPO-clip and Adam reproduce PPO, and every
candidate of the bad-candidate corpus (tests/bad_candidates/) stops at the right stage with the
right reason, within its time limit, leaving no process and no file behind.

Each corpus file starts with a header:
    # task: drift | optimizer
    # expect-stage: static | probes | short | full
    # expect-reason: a substring of the reason
    # settings: {"timeout_s": 6}      (optional overrides of the corpus settings)
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from metarl.evaluation.cascade import CascadeSettings, Evaluator, evaluate_source
from metarl.evaluation.outcome import Outcome
from metarl.tasks import get_task

CORPUS = Path(__file__).parent / "bad_candidates"
# 4500 steps is not a whole number of updates (4 envs x 128 steps): the trainer runs 8 updates,
# 4096 steps, and the parent's check of the returned runs must expect exactly that.
BASE = dict(
    suite="smoke",
    seeds=1,
    seed_values=[0],
    total_timesteps=4500,
    short_timesteps=4096,
    timeout_s=60,
    probe_seed=0,
)
MARKERS = "/tmp/metarl-bad-candidate-was-here*"


@pytest.fixture(scope="module", autouse=True)
def cache_dir(metarl_cache):
    """The session's METARL_CACHE_DIR (tests/conftest.py): baselines are trained once."""
    return metarl_cache


def header(path: Path) -> dict:
    fields = dict(re.findall(r"^# ([\w-]+): (.*)$", path.read_text(), re.M))
    fields["settings"] = json.loads(fields.get("settings", "{}"))
    return fields


CORPUS_FILES = sorted(CORPUS.glob("*.py"))


def gone(pid: int | None) -> bool:
    if pid is None:
        return True
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# --- the seeds -----------------------------------------------------------------------------------
SEEDS = [("drift", "ppo_clip"), ("drift", "lpo"), ("optimizer", "adam"), ("optimizer", "sgd")]


@pytest.fixture(scope="module")
def evaluator():
    """One Evaluator with the corpus settings for the module: its pre-warmed workers are used
    rather than started and thrown away by an Evaluator per test (every job still gets a fresh
    worker of its own)."""
    # the baselines first, with no spare workers starting beside them: their measured time is
    # the yardstick of every training limit (tests/test_hostile.py's world does the same)
    with Evaluator(CascadeSettings(**BASE), workers=1, prewarm=False) as quiet:
        quiet.references("drift")
        quiet.references("optimizer")
    with Evaluator(CascadeSettings(**BASE), workers=2) as the_evaluator:
        yield the_evaluator


@pytest.fixture(scope="module")
def seed_outcomes(evaluator):
    """Every seed through the full cascade, one batch per task (as discovery scores a
    generation: one compiled training program for the task's seeds, not one each)."""
    outcomes = {}
    for task in dict.fromkeys(task for task, _ in SEEDS):
        names = [name for seed_task, name in SEEDS if seed_task == task]
        sources = [get_task(task).seed_program(name).source for name in names]
        outcomes.update(zip([(task, n) for n in names], evaluator.evaluate_batch(sources, task)))
    return outcomes


@pytest.mark.parametrize("task, name", SEEDS)
def test_every_seed_passes_the_whole_cascade(seed_outcomes, task, name):
    outcome = seed_outcomes[(task, name)]
    assert outcome.passed, f"{outcome.stage}: {outcome.reason}"
    assert outcome.stage == "full" and outcome.reason is None
    assert outcome.warnings == []
    assert outcome.fingerprint and len(outcome.fingerprint) == 16
    (score,) = [s for s in outcome.env_scores if s.stage == "full"]
    assert score.env == "CartPole-v1" and score.total_timesteps == 4096 and score.seeds == [0]
    assert math.isfinite(score.mean) and score.random_mean is not None
    assert outcome.fitness == pytest.approx(score.normalised)
    for key in ("static", "probes", "compile", "run", "sandbox", "teardown", "total"):
        assert key in outcome.timings
    assert outcome.sandbox["network"] in ("netns", "socket-stub")


def test_baseline_seeds_reproduce_ppo_with_adam_exactly(seed_outcomes):
    ppo_clip = seed_outcomes[("drift", "ppo_clip")].env_scores[0]
    adam = seed_outcomes[("optimizer", "adam")].env_scores[0]
    # both are PPO with Adam: same seeds, same returns, bit for bit
    assert ppo_clip.returns == adam.returns
    assert ppo_clip.curve == adam.curve
    assert ppo_clip.normalised == adam.normalised == 1.0


def test_the_baseline_program_scores_from_its_runs_what_training_it_gives(evaluator):
    """PPO-clip, the drift task's baseline program, is not trained again as a candidate: its
    trainer job verifies, probes and fingerprints it, and its scores are the baseline's runs
    on the batch's seeds. The same program with a local renamed is no copy by source, so it
    trains, beside it: it must score exactly the same, return for return."""
    ppo = get_task("drift").seed_program("ppo_clip").source
    renamed = ppo.replace("clipped_ratio", "kept")
    assert renamed != ppo
    copy, trained = evaluator.evaluate_batch([ppo, renamed], "drift")
    assert copy.passed and trained.passed, (copy.reason, trained.reason)
    assert copy.sandbox["runs"].startswith("the baseline's") and "runs" not in trained.sandbox
    assert copy.timings["run"] == 0.0 < trained.timings["run"]
    assert copy.fingerprint == trained.fingerprint
    assert len(copy.env_scores) == len(trained.env_scores) > 0
    for read, run in zip(copy.env_scores, trained.env_scores):
        assert (read.env, read.stage, read.seeds) == (run.env, run.stage, run.seeds)
        assert read.total_timesteps == run.total_timesteps
        assert read.returns == run.returns and read.curve == run.curve
        assert read.normalised == run.normalised == 1.0
    assert copy.fitness == trained.fitness == 1.0


def test_a_copy_of_a_known_baseline_program_still_stops_as_its_duplicate(evaluator):
    """Reading the baseline's runs skips training, not the trusted probes: a copy whose
    fingerprint the run already knows stops there, as it would have."""
    ppo = get_task("drift").seed_program("ppo_clip").source
    (first,) = evaluator.evaluate_batch([ppo], "drift")
    (again,) = evaluator.evaluate_batch([ppo], "drift", {first.fingerprint: "c-1"})
    assert not again.passed and again.stage == "probes" and again.duplicate_of == "c-1"
    assert again.env_scores == []


def test_an_optimizer_that_never_learns_is_stopped_by_the_short_run(evaluator):
    frozen = (
        "def optimizer(grad, param, momentum, state, step, progress, lr):\n"
        "    return 0.0 * grad, state\n"
    )
    outcome = evaluator.evaluate(frozen, "optimizer")
    assert not outcome.passed and outcome.stage == "short"
    assert (
        "short run: normalised score" in outcome.reason
        and "below the threshold 0.25" in outcome.reason
    )
    assert [s.stage for s in outcome.env_scores] == ["short"]
    assert outcome.env_scores[0].normalised < 0.25
    assert outcome.fitness is None


def test_duplicates_are_recognised_by_behaviour(seed_outcomes, evaluator):
    fingerprint = seed_outcomes[("drift", "ppo_clip")].fingerprint
    rewritten = (
        "def drift(ratio, advantage, epsilon):\n"
        "    excess = ratio - jnp.minimum(jnp.maximum(ratio, 1.0 - epsilon), 1.0 + epsilon)\n"
        "    return jnp.maximum(excess * advantage, 0.0)\n"
    )
    outcome = evaluator.evaluate(rewritten, "drift", known_fingerprints={fingerprint: "cand-7"})
    assert not outcome.passed and outcome.stage == "probes"
    assert outcome.reason == "behaves identically to candidate cand-7"
    assert outcome.duplicate_of == "cand-7" and outcome.fingerprint == fingerprint
    assert gone(outcome.sandbox["worker_pid"])


def test_baseline_helper_returns_cached_runs(seed_outcomes):
    with Evaluator(CascadeSettings(**BASE), workers=1, prewarm=False) as evaluator:
        runs = evaluator.baseline("drift")
    assert list(runs) == ["CartPole-v1"]
    assert (
        runs["CartPole-v1"].final_returns
        == seed_outcomes[("drift", "ppo_clip")].env_scores[0].returns
    )


def test_outcome_round_trips_through_json(seed_outcomes):
    outcome = seed_outcomes[("drift", "lpo")]
    again = Outcome.from_dict(json.loads(json.dumps(outcome.to_dict())))
    assert again.to_dict() == outcome.to_dict()


# --- the bad-candidate corpus ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus_outcomes(evaluator):
    """Corpus files with the default corpus settings, two at a time through one Evaluator."""
    plain = [p for p in CORPUS_FILES if not header(p)["settings"]]
    results = {}

    def run(evaluator, path):
        fields = header(path)
        start = time.perf_counter()
        outcome = evaluator.evaluate(path.read_text(), fields["task"])
        return path.name, (outcome, time.perf_counter() - start)

    with ThreadPoolExecutor(2) as threads:
        results.update(threads.map(lambda p: run(evaluator, p), plain))
    return results


def test_corpus_is_big_and_covers_every_stage_that_can_fail():
    stages = [header(p)["expect-stage"] for p in CORPUS_FILES]
    assert len(CORPUS_FILES) >= 40
    assert {"static", "probes", "short"} <= set(stages)


@pytest.mark.parametrize("path", CORPUS_FILES, ids=[p.stem for p in CORPUS_FILES])
def test_bad_candidate_is_stopped_at_the_right_stage(path, corpus_outcomes):
    fields = header(path)
    if fields["settings"]:
        settings = CascadeSettings(**{**BASE, **fields["settings"]})
        start = time.perf_counter()
        outcome = evaluate_source(path.read_text(), fields["task"], settings)
        elapsed = time.perf_counter() - start
    else:
        settings = CascadeSettings(**BASE)
        outcome, elapsed = corpus_outcomes[path.name]
    assert outcome.stage == fields["expect-stage"], outcome.reason
    assert not outcome.passed
    assert fields["expect-reason"] in (outcome.reason or ""), outcome.reason
    # within its time limit: the sandboxed part never outlives timeout_s (+ the kill)
    assert outcome.timings.get("sandbox", 0.0) <= settings.timeout_s + 2.0
    assert outcome.timings.get("teardown", 0.0) < 5.0
    # the worker that ran it is gone, its temp dir too, and nothing was written elsewhere
    if fields["expect-stage"] != "static":
        assert gone(outcome.sandbox["worker_pid"])
        assert not os.path.exists(outcome.sandbox["workdir"])
    else:
        assert "worker_pid" not in outcome.sandbox  # never left the parent, never executed
        assert elapsed < 1.0
    assert glob.glob(MARKERS) == []


def test_workers_write_only_cache_entries_outside_their_temp_dir(cache_dir, corpus_outcomes):
    for sub in ("baselines", "random"):
        for path in (cache_dir / sub).glob("*"):
            assert path.suffix == ".json", path  # whole entries only (atomic writes), no debris


@pytest.mark.long  # the classic suite's roles at length (~320 s in .ci/run on 2 cores)
def test_classic_suite_scores_each_role_separately():
    settings = CascadeSettings(
        suite="classic",
        seeds=2,
        seed_values=[0, 1],
        total_timesteps=8192,
        short_timesteps=4096,
        timeout_s=600,
        validation=True,
    )
    outcome = evaluate_source(get_task("drift").seed_program("lpo").source, "drift", settings)
    assert outcome.passed, outcome.reason
    envs = [(s.env, s.role) for s in outcome.env_scores if s.stage == "full"]
    assert envs == [
        ("CartPole-v1", "train"),
        ("Acrobot-v1", "train"),
        ("Catch-bsuite", "validation"),
        ("Breakout-MinAtar", "validation"),
        ("SpaceInvaders-MinAtar", "test"),
    ]
    assert None not in (outcome.fitness, outcome.validation, outcome.heldout)


# --- batches --------------------------------------------------------------------------------------
HOG = """
def optimizer(grad, param, momentum, state, step, progress, lr):
    # 20,000 sequential steps per call: a moment for the probes' few elements, minutes for a
    # network's thousands in training (the trainer hangs until its limit)
    spin = lax.fori_loop(0, 20000, lambda i, x: jnp.sin(x) + grad, grad)
    return -lr * grad + 0.0 * spin, state
"""
OVERFLOWING = """
def optimizer(grad, param, momentum, state, step, progress, lr):
    # fine for the probes' first steps, overflows float32 after ~60 optimizer steps
    return -lr * grad * 10.0 ** (step - 20.0), state
"""


@pytest.mark.slow  # end to end: a killed trainer, then each candidate again (~50 s)
def test_a_batch_isolates_a_candidate_that_kills_its_trainer_and_scores_the_others():
    settings = CascadeSettings(
        **{**BASE, "train_timeout_floor_s": 20.0, "train_timeout_factor": 1.0, "memory_mb": 4096}
    )
    # Adam with a local renamed: trained in the batch (the baseline program itself is not)
    adam = get_task("optimizer").baseline_program().source.replace("new_state", "next_state")
    with Evaluator(settings, workers=1) as evaluator:
        hog, honest, overflowing = evaluator.evaluate_batch([HOG, adam, OVERFLOWING], "optimizer")
    assert honest.passed and honest.fitness == 1.0, honest.reason
    assert not overflowing.passed and overflowing.stage == "short"
    assert overflowing.reason.startswith("training produced NaN/inf at update")
    assert not hog.passed and hog.stage == "short"
    assert "timed out" in hog.reason or "memory" in hog.reason, hog.reason
    # blamed alone: stopped by its own clock in the batch's trainer ("timed out ... more than
    # its own limit"), or, out of memory, once it failed in a trainer of its own; the others
    # were trained again without it
    if "more than its own limit" in hog.reason:
        assert hog.sandbox["batch"] == {"size": 3, "position": 0}
    else:
        assert hog.sandbox["batch"] == {"size": 1, "position": 0}
    assert honest.sandbox["batch"]["size"] == 2
    assert all(gone(o.sandbox["worker_pid"]) for o in (hog, honest, overflowing))


def test_a_candidates_scores_do_not_depend_on_its_batch(seed_outcomes, evaluator):
    lpo = get_task("drift").seed_program("lpo").source
    # PPO-clip with a local renamed: trained (the seed itself is scored from the baseline's runs)
    ppo_clip = get_task("drift").seed_program("ppo_clip").source.replace("clipped_ratio", "kept")
    batched = evaluator.evaluate_batch([ppo_clip, lpo], "drift")
    for outcome, name in zip(batched, ("ppo_clip", "lpo")):
        alone = seed_outcomes[("drift", name)]
        assert outcome.sandbox["batch"] == {"size": 2, "position": ["ppo_clip", "lpo"].index(name)}
        assert [s.returns for s in outcome.env_scores] == [s.returns for s in alone.env_scores]
        assert outcome.fitness == alone.fitness
