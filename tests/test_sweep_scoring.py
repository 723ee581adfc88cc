"""Learning-rate sweeps in the cascade (issue 23): one planned full run per rate, all rates in
one program, the baseline swept alike, and a swept env's score as DiscoBench's best rate or
the mean over rates; the test envs measured at the rate validation chose."""

from __future__ import annotations

import pytest

from metarl.discovery.config import ConfigError, DiscoverConfig
from metarl.evaluation.outcome import EnvScore, Outcome
from metarl.evaluation.roles import rate_scores, score_roles
from metarl.evaluation.settings import CascadeSettings, plan_runs, validate
from metarl.evaluation.stages import group_by_config
from metarl.rl.configs import default_config
from metarl.rl.lr_sweep import log_grid


def settings(**changes) -> CascadeSettings:
    base = dict(suite="smoke", seeds=2, seed_values=[0, 1], total_timesteps=4096)
    return CascadeSettings(**{**base, **changes})


def test_a_sweep_plans_one_full_run_per_rate_in_one_program():
    plan = plan_runs(settings(lr_sweep="3", short_timesteps=1024))
    tuned = default_config("CartPole-v1").lr
    rates = log_grid(tuned, 3)
    assert [(e.stage, e.config.lr) for e in plan] == [
        ("short", pytest.approx(tuned)),
        *[("full", pytest.approx(lr)) for lr in rates],
    ]
    assert len({e.key for e in plan}) == 4  # every segment has its own reference
    [group] = group_by_config(plan)  # one compiled program: the rate is a vmapped axis
    assert all(e.sweep == rates for e in group)
    unswept = plan_runs(settings(short_timesteps=1024))
    assert [e.sweep for e in unswept] == [(), ()] and len(group_by_config(unswept)) == 1


def test_explicit_rates_apply_to_every_env_and_bad_sweeps_are_refused():
    plan = plan_runs(settings(lr_sweep="1e-3,1e-4", skip_short=True))
    assert [e.config.lr for e in plan] == [1e-4, 1e-3]
    for bad in ("0", "1e-3,-1", "fast", "1e-3,1e-3"):
        with pytest.raises(ValueError):
            validate(settings(lr_sweep=bad))
    with pytest.raises(ValueError, match="aggregation"):
        validate(settings(lr_sweep="3", lr_aggregation="median"))
    with pytest.raises(ConfigError, match="learning rate"):
        DiscoverConfig(lr_sweep="1e-3,fast").resolved()


def swept(env, rates, means, baselines, random=0.0, role="train"):
    """EnvScores of one env swept at `rates`: two seeds each, mean `means[i]`."""
    return [
        EnvScore(
            env=env,
            seeds=[0, 1],
            total_timesteps=4096,
            returns=[m - 1.0, m + 1.0],
            mean=m,
            std=1.0,
            normalised=(m - random) / (b - random),
            baseline_mean=b,
            random_mean=random,
            role=role,
            lr=lr,
        )
        for lr, m, b in zip(rates, means, baselines)
    ]


def test_best_lr_score_is_the_maximum_of_the_per_lr_scores_computed_separately():
    rates = (1e-4, 3e-4, 1e-3)
    means, baselines = (20.0, 60.0, 45.0), (30.0, 50.0, 40.0)
    # each rate normalised on its own against the baseline at its best rate (PPO tuned by
    # the same sweep): (R_l - R_random) / (max_l B_l - R_random)
    per_lr = [(m - 0.0) / (max(baselines) - 0.0) for m in means]
    best = Outcome(
        passed=True, stage="full", env_scores=swept("CartPole-v1", rates, means, baselines)
    )
    score_roles(best, "best")
    assert best.fitness == pytest.approx(max(per_lr)) == pytest.approx(1.2)
    mean = Outcome(
        passed=True, stage="full", env_scores=swept("CartPole-v1", rates, means, baselines)
    )
    score_roles(mean, "mean")
    assert mean.fitness == pytest.approx(sum(per_lr) / 3)
    # a swept env counts once among the role's envs
    two = swept("CartPole-v1", rates, means, baselines) + swept(
        "Acrobot-v1", rates, means, baselines
    )
    both = Outcome(passed=True, stage="full", env_scores=two)
    score_roles(both, "best")
    assert both.fitness == pytest.approx(1.2)


def test_the_rate_validation_chose_is_the_one_with_the_best_score_on_one_yardstick():
    grid = log_grid(1.0, 3)
    rows = []
    for seeds in ([5, 6], [7, 8]):  # two validation rounds, one env
        for lr, returns, baseline in zip(grid, ([10, 12], [30, 34], [20, 22]), (25, 40, 80)):
            rows.append(
                dict(
                    env="Catch-bsuite",
                    lr=lr,
                    seeds=seeds,
                    returns=returns,
                    baseline_mean=baseline,
                    random_mean=0.0,
                )
            )
    scores = rate_scores(rows, grid)
    # the baseline's best rate (80) is the yardstick: 11/80, 32/80, 21/80
    assert scores == pytest.approx([11 / 80, 32 / 80, 21 / 80])


@pytest.mark.slow
def test_the_sweeps_baseline_is_ppo_at_each_rate(metarl_cache):
    from metarl.evaluation.cascade import Evaluator
    from metarl.tasks import get_task

    task = get_task("drift")
    sources = [task.seed_program(name).source for name in ("ppo_clip", "lpo")]
    swept_settings = settings(lr_sweep="3", skip_short=True, probe_seed=0)
    with Evaluator(swept_settings, workers=1, prewarm=False) as evaluator:
        ppo, lpo = evaluator.evaluate_batch(sources, "drift")
    assert ppo.passed and lpo.passed, (ppo.reason, lpo.reason)
    rates = log_grid(default_config("CartPole-v1").lr, 3)
    assert [s.lr for s in ppo.env_scores] == pytest.approx(list(rates))
    # PPO-clip is the baseline program: at every rate it scores exactly 1 against the
    # baseline trained at that rate, on the same seeds, in the same kind of program
    assert [s.normalised for s in ppo.env_scores] == [1.0, 1.0, 1.0]
    baselines = [s.baseline_mean for s in ppo.env_scores]
    assert len(set(baselines)) == 3  # one baseline per rate, not one reused
    best = max(range(3), key=lambda i: baselines[i])
    assert ppo.fitness == pytest.approx(1.0)  # its best rate is the baseline's best rate
    assert [s.lr for s in lpo.env_scores] == pytest.approx(list(rates))
    assert lpo.fitness == pytest.approx(
        max((s.mean - s.random_mean) / (baselines[best] - s.random_mean) for s in lpo.env_scores)
    )


def test_a_validation_round_of_a_swept_env_combines_its_rates_as_its_score_does():
    from metarl.evaluation.roles import comparable, role_table

    rates, baselines = (1e-4, 3e-4, 1e-3), (30.0, 50.0, 40.0)
    rows = [
        dict(
            env="Catch-bsuite",
            lr=lr,
            seeds=[5, 6],
            returns=returns,
            baseline_mean=b,
            random_mean=0.0,
        )
        for lr, returns, b in zip(rates, ([10.0, 30.0], [55.0, 65.0], [40.0, 50.0]), baselines)
    ]
    for aggregation in ("best", "mean"):
        scores = swept("Catch-bsuite", rates, (20.0, 60.0, 45.0), baselines, role="validation")
        outcome = Outcome(passed=True, stage="full", env_scores=scores)
        score_roles(outcome, aggregation)
        matrix, columns = role_table(rows, ["Catch-bsuite"], aggregation)
        assert columns == ["Catch-bsuite"] and matrix.shape == (2, 1)
        assert float(matrix.mean()) == pytest.approx(outcome.validation)
    # an env one candidate never had defined is left out of both sides of a comparison
    undefined = [dict(r, env="Breakout-MinAtar", baseline_mean=0.0) for r in rows]
    one = role_table(rows + undefined, ["Catch-bsuite", "Breakout-MinAtar"])
    other = role_table(
        rows + [dict(r, env="Breakout-MinAtar") for r in rows], ["Catch-bsuite", "Breakout-MinAtar"]
    )
    assert one[1] == ["Catch-bsuite"] and other[1] == ["Catch-bsuite", "Breakout-MinAtar"]
    a, b = comparable(one, other)
    assert a.shape == b.shape == (2, 1)
