"""Multi-fidelity evaluation (evaluation/fidelity.py): rungs at which a candidate clearly below
half the baseline's progress on the same seeds stops, and nothing else changes."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, replace

import numpy as np
import pytest

from metarl.discovery.config import ConfigError, DiscoverConfig
from metarl.discovery.records import cascade_settings
from metarl.evaluation import stages
from metarl.evaluation.batch_training import verify_outcome
from metarl.evaluation.fidelity import paired_upper_bound, rung_reason, rung_updates
from metarl.evaluation.outcome import MalformedResult, parse_outcome
from metarl.evaluation.references import baseline_reference
from metarl.evaluation.settings import CascadeSettings, Reference, plan_runs, validate
from metarl.platform import backend
from metarl.tasks import get_task

DRIFT = get_task("drift")
PLATFORM = backend()
# two seeds (a paired test needs a spread), a 64-update run on the smoke suite whose short run
# is update 32; the rung at 1/4 is update 16
FULL = CascadeSettings(
    suite="smoke",
    seeds=2,
    seed_values=[0, 1],
    total_timesteps=32768,
    short_timesteps=16384,
    probe_seed=0,
)
RUNGS = replace(FULL, rungs=[0.25])


# -- the rule ----------------------------------------------------------------------------------
def test_a_consistent_deficit_is_clearly_below_the_bar_and_says_its_numbers():
    # random 20, baseline ~93: half its progress is ~56; the candidate is at 21
    reason = rung_reason(
        "CartPole-v1", 8192, 0.25, [20.0, 22.0, 21.0], [90.0, 95.0, 93.0], 20.0, 0.5, 0.95, "ppo"
    )
    assert reason.startswith("rung 0.25 of the budget on CartPole-v1 (8192 steps): mean return 21")
    assert "against ppo's 92.67 on the same 3 seeds (random policy 20)" in reason
    assert "paired margin over 0.5 of ppo's progress is" in reason
    assert reason.endswith("< 0 (clearly below); stopped")


def test_a_slower_learner_above_half_the_baselines_progress_goes_on():
    # consistently worse than the baseline (the bar at 1 stops it) but well above half its
    # progress: early speed is not the score
    returns, baseline = [58.0, 60.0], [73.0, 75.0]
    assert rung_reason("E", 1, 0.3, returns, baseline, 22.0, 1.0, 0.95, "b") is not None
    assert rung_reason("E", 1, 0.3, returns, baseline, 22.0, 0.5, 0.95, "b") is None


def test_a_noisy_or_even_candidate_goes_on():
    # the mean is lower but one seed is better: the 95% bound is above zero
    noisy = [10.0, 100.0, 30.0]
    assert rung_reason("E", 1, 0.3, noisy, [50.0, 52.0, 49.0], 0.0, 1.0, 0.95, "b") is None
    # the baseline itself: every paired difference is zero, the bound is zero, not below it
    assert paired_upper_bound([5.0, 7.0], [5.0, 7.0], 0.95) == 0.0
    assert rung_reason("E", 1, 0.3, [5.0, 7.0], [5.0, 7.0], 1.0, 1.0, 0.95, "b") is None


def test_one_seed_or_a_non_finite_return_decides_nothing():
    assert paired_upper_bound([1.0], [100.0], 0.95) is None
    assert paired_upper_bound([1.0, float("nan")], [100.0, 100.0], 0.95) is None
    assert paired_upper_bound([1.0, 2.0], [100.0], 0.95) is None  # not paired


def test_the_bound_is_the_one_sided_t_bound_of_the_paired_mean():
    diff = np.array([-3.0, -1.0, -2.0, -6.0])
    expected = diff.mean() + 2.3533634 * diff.std(ddof=1) / 2.0  # t(0.95, 3 df)
    assert paired_upper_bound(diff, np.zeros(4), 0.95) == pytest.approx(expected, rel=1e-6)


# -- the plan ------------------------------------------------------------------------------------
def test_rungs_are_segments_of_each_training_run_in_update_order():
    plan = [(e.stage, e.config.env_name, e.updates, e.rung) for e in plan_runs(RUNGS)]
    assert plan == [
        ("short", "CartPole-v1", 16, 0.25),
        ("short", "CartPole-v1", 32, None),
        ("full", "CartPole-v1", 64, None),
    ]
    classic = plan_runs(CascadeSettings(suite="classic", total_timesteps=98304, rungs=[1 / 3]))
    rows = [(e.stage, e.config.env_name, e.rung is not None) for e in classic]
    # the demo's budget: the rung (update 8 of 24) comes before the short run (update 10)
    assert rows[:5] == [
        ("short", "CartPole-v1", True),
        ("short", "CartPole-v1", False),
        ("full", "CartPole-v1", False),
        ("short", "Acrobot-v1", True),
        ("full", "Acrobot-v1", False),
    ]
    assert all(e.rung is None for e in classic[5:])  # held-out envs have no rungs


def test_without_rungs_the_plan_is_todays():
    assert plan_runs(replace(FULL, rungs=[])) == plan_runs(FULL)
    assert [e.rung for e in plan_runs(FULL)] == [None, None]


def test_a_rung_on_the_short_run_or_the_whole_run_adds_no_segment():
    assert rung_updates(0.999, 64) is None
    assert plan_runs(replace(FULL, rungs=[0.5])) == plan_runs(FULL)  # update 32: the short run


def test_a_rung_outside_the_budget_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"fraction of the budget in \(0, 1\), not 1.5"):
        validate(replace(FULL, rungs=[1.5]))
    with pytest.raises(ConfigError, match="unknown fidelity 'half'; choose rungs or full"):
        DiscoverConfig(task="drift", suite="smoke", fidelity="half").resolved()


def test_discovery_puts_rungs_on_children_only_and_only_when_asked():
    config = DiscoverConfig(task="drift", suite="smoke", fidelity="rungs").resolved()
    assert config.rungs == [1 / 3]
    assert cascade_settings(config, "child", [0, 1]).rungs == [1 / 3]
    for purpose in ("seed", "confirm", "final"):
        assert not cascade_settings(config, purpose, [0, 1]).rungs
    default = DiscoverConfig(task="drift", suite="smoke").resolved()
    assert default.fidelity == "full"  # off until a rung before any ended episode is handled
    assert cascade_settings(default, "child", [0, 1]).rungs is None


# -- the stages, in process ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def baselines() -> dict[str, dict]:
    """The baseline's per-seed returns on every segment of the plan with rungs."""
    wanted = [entry.key for entry in plan_runs(RUNGS)]
    runs = stages.train_baselines(DRIFT, RUNGS, wanted, PLATFORM)
    out: dict[str, dict] = {}
    for run in runs.runs:  # one run per segment and seed, in the seeds' order
        entry = out.setdefault(run["key"], {"final_returns": [], "random_mean": 0.0, "runs": []})
        entry["final_returns"] += [float(v) for v in run["final_returns"]]
        entry["runs"].append(run)
        entry["random_mean"] = runs.random[run["env"]]
    assert all(len(entry["final_returns"]) == 2 for entry in out.values())
    return out


def _references(baselines: dict, inflate: float = 0.0) -> dict[str, dict]:
    """The worker's references; `inflate` adds to the baseline's returns at the rung only."""
    rung_keys = {e.key for e in plan_runs(RUNGS) if e.rung is not None}
    out = {}
    for key, run in baselines.items():
        returns = [v + (inflate if key in rung_keys else 0.0) for v in run["final_returns"]]
        out[key] = {
            "baseline_mean": float(np.mean(returns)),
            "random_mean": run["random_mean"],
            "baseline_returns": returns,
        }
    return out


@pytest.fixture(scope="module")
def artifact() -> dict:
    traced = stages.trace_candidate(
        DRIFT, DRIFT.seed_program("ppo_clip").source, probe_seed=0, platform=PLATFORM
    )
    assert traced.ok, traced.reason
    return traced.artifact


def _scored(score) -> dict:
    """An env score without its timings (wall clock is not a score)."""
    return asdict(score) | {"compile_s": 0.0, "run_s": 0.0, "steps_per_s": 0.0}


def test_a_candidate_that_passes_its_rungs_scores_bit_for_bit_as_at_full_fidelity(
    artifact, baselines
):
    references = _references(baselines)
    full = stages.evaluate_artifact(DRIFT, artifact, FULL, references, 7, PLATFORM)
    rungs = stages.evaluate_artifact(DRIFT, artifact, RUNGS, references, 7, PLATFORM)
    assert full.passed and rungs.passed, (full.reason, rungs.reason)
    assert [s.total_timesteps for s in rungs.env_scores] == [8192, 16384, 32768]
    assert [_scored(s) for s in rungs.env_scores[1:]] == [_scored(s) for s in full.env_scores]
    assert rungs.fitness == full.fitness and rungs.fitness_ci == full.fitness_ci


def test_a_candidate_clearly_worse_at_a_rung_stops_there_and_trains_no_further(artifact, baselines):
    # the same honest candidate against a baseline made 1000 better at the rung only: far
    # below half of that progress
    references = _references(baselines, inflate=1000.0)
    outcome = stages.evaluate_artifact(DRIFT, artifact, RUNGS, references, 7, PLATFORM)
    assert not outcome.passed and outcome.stage == "short"
    assert outcome.reason.startswith("rung 0.25 of the budget on CartPole-v1 (8192 steps)")
    assert [s.total_timesteps for s in outcome.env_scores] == [8192]  # nothing trained after
    assert outcome.fitness is None


def test_the_parent_refuses_a_passed_result_that_is_clearly_worse_at_a_rung(artifact, baselines):
    honest = stages.evaluate_artifact(DRIFT, artifact, RUNGS, _references(baselines), 7, PLATFORM)
    inflated = _references(baselines, inflate=1000.0)
    references = {
        key: Reference(r["baseline_mean"], r["random_mean"], 1.0, {"final_returns": returns})
        for key, r in inflated.items()
        for returns in [r["baseline_returns"]]
    }
    with pytest.raises(MalformedResult, match="clearly below the bar at a rung"):
        verify_outcome(honest, plan_runs(RUNGS), references, RUNGS)


def test_where_a_run_is_cut_into_segments_never_changes_its_scores(baselines):
    """The final return's window is the run's last 10%, not the segment's (rl/ppo.py): the
    whole run in one segment, cut at the short run, or cut at a rung and the short run, scores
    the same bit for bit, so a baseline cached from one plan is paired with any other."""
    plan = {e.updates: e.key for e in plan_runs(RUNGS)}
    whole = replace(FULL, skip_short=True)  # one segment: updates 0..64
    short_only = FULL  # 0..32, 32..64
    for settings, stops in ((whole, [64]), (short_only, [32, 64])):
        keys = [plan[stop] for stop in stops]
        runs = stages.train_baselines(DRIFT, settings, keys, PLATFORM).runs
        for key in keys:
            mine = [r for r in runs if r["key"] == key]
            returns = [v for r in mine for v in r["final_returns"]]
            assert returns == baselines[key]["final_returns"], (settings.skip_short, key)
            assert [r["positive_value_loss"] for r in mine] == [
                r["positive_value_loss"] for r in baselines[key]["runs"]
            ]


def test_a_baseline_seed_with_no_ended_episode_makes_the_reference_undefined_not_a_crash():
    """A rung early in a long-episode env (Freeway-MinAtar at 1/3 of 2e5 steps) can end where
    no episode of a seed ended in the window: the cached return is None. The reference is then
    NaN (normalised scores undefined) and the rung decides nothing."""
    runs = [
        {"final_returns": [None], "seeds": [0], "curve": [], "curve_std": []},
        {"final_returns": [3.0], "seeds": [1], "curve": [], "curve_std": []},
    ]
    reference = baseline_reference(runs, 0.5)
    assert math.isnan(reference.baseline_mean)
    assert reference.run["final_returns"][1] == 3.0
    bars = reference.run["final_returns"]
    assert rung_reason("E", 1, 0.3, [0.0, 0.0], bars, 0.5, 0.5, 0.95, "b") is None


def test_a_seed_with_no_ended_episode_at_a_rung_is_undecided_not_malformed(artifact, baselines):
    """The candidate's own rung return can be undefined too (no Freeway-MinAtar episode ends in
    the first third of 2e5 steps): through the worker's JSON (NaN becomes None) the parent reads
    it as NaN, the rung decides nothing and the other scores stand."""
    references = _references(baselines, inflate=1000.0)  # clearly below the bar, if defined
    honest = stages.evaluate_artifact(DRIFT, artifact, RUNGS, _references(baselines), 7, PLATFORM)
    assert honest.passed, honest.reason
    honest.env_scores[0].returns = [math.nan, 1.0]  # the rung: seed 0 ended no episode
    message = parse_outcome(json.loads(json.dumps(honest.to_dict())))
    assert message.env_scores[0].returns[0] is None
    parent = {
        key: Reference(r["baseline_mean"], r["random_mean"], 1.0, {"final_returns": returns})
        for key, r in references.items()
        for returns in [r["baseline_returns"]]
    }
    verified = verify_outcome(message, plan_runs(RUNGS), parent, RUNGS)
    rung = verified.env_scores[0]
    assert math.isnan(rung.returns[0]) and math.isnan(rung.mean) and rung.normalised is None
    assert [s.mean for s in verified.env_scores[1:]] == [s.mean for s in honest.env_scores[1:]]
