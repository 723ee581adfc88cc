"""Named environment suites: the user's vocabulary for "train on what, for how long".

A suite gives its environments three roles: *train* (scores rank proposals), *validation*
(scores on fresh seeds decide the incumbent) and *test* (`heldout`: scored and reported,
never read by selection, prompts or rewards). Budgets are per environment; `short_budget` is
the cascade's cheap first look at the first training environment.

Why these environments (benchmarks/discrimination.py, RESULTS.md): an environment earns a
role only if programs known to differ score differently there by more than seed noise. At
the demo's 1e5 steps, CartPole and Acrobot barely separate PPO-clip from no trust region or a
too-tight one (discrimination ratio 0.9 each, 4 seeds); Catch separates them a little, with
almost no seed noise (ratio 5.5, spread 0.10); Breakout- and SpaceInvaders-MinAtar separate
them widely (ratio 15.5 and 23; no trust region scores ~0). So `classic` validates on Catch
and Breakout and tests on SpaceInvaders, where Catch used to be its only held-out env.

`discobench` is `minatar`'s split under DiscoGen 1.3.0's own config and scoring (rl/discobench.py):
one learning rate for every game (swept by the `discobench` protocol), and a greedy evaluation
of the final policy as the score instead of the last training episodes.

A suite may carry published PPO returns (`published`: source label -> env -> mean final
return) that scores are also normalised against, next to this machine's own baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from metarl.errors import USAGE, MetarlError
from metarl.rl.configs import META_CONFIGS, PPOConfig, default_config
from metarl.rl.discobench import DISCOBENCH_MINATAR, DISCOBENCH_SEEDS
from metarl.rl.environments.distributions import (
    DISTRIBUTIONS,
    TEST_SEEDS,
    VALIDATION_SEEDS,
    EnvDistribution,
)
from metarl.rl.meta.names import METHODS, MetaEnv

# the five tabular levels of the LPG paper (rl/environments/levels.py)
TABULAR_LEVELS = ("Grid-dense", "Grid-sparse", "Grid-long", "Grid-longer", "Grid-long_dense")

# source label -> env -> the published PPO mean final return
PublishedReturns = Mapping[str, Mapping[str, float]]


class UnknownSuite(MetarlError, KeyError):
    """A suite name not in SUITES; the message lists the known ones."""

    exit_code = USAGE


@dataclass(frozen=True)
class Suite:
    name: str
    envs: tuple[str, ...]
    total_timesteps: int
    short_budget: int
    heldout: tuple[str, ...] = ()  # the test role: scored and reported, never selected on
    default_seeds: int = 4
    overrides: dict = field(default_factory=dict)
    description: str = ""
    published: PublishedReturns = field(default_factory=dict)
    # the validation role: what decides the incumbent, on fresh seeds (other environments or
    # variants `Base:field=value` of the training ones; rl/environments/registry.py)
    validation: tuple[str, ...] = ()
    # a suite of drawn environments (grid levels, gymnax parameter ranges): its train role can
    # be drawn anew by a curriculum (`--curriculum`); `envs` are its fixed default draws
    distribution: EnvDistribution | None = None

    @property
    def test(self) -> tuple[str, ...]:
        """The test role's environments (`heldout`)."""
        return self.heldout

    @property
    def all_envs(self) -> tuple[str, ...]:
        """Every environment of the suite: train, validation, test."""
        return (*self.envs, *self.validation, *self.heldout)

    def roles(self) -> dict[str, list[str]]:
        """role -> its environments, in order (train, validation, test)."""
        return {
            "train": list(self.envs),
            "validation": list(self.validation),
            "test": list(self.heldout),
        }

    def budget(self, timesteps: int | None = None) -> int:
        """The per-environment budget a run of this suite trains: `timesteps`, or the suite's
        own when it is None or 0. Every command resolves its `--timesteps` here, so `discover`
        and `evaluate` train a suite alike."""
        return int(timesteps or self.total_timesteps)

    def config(self, env_name: str, total_timesteps: int | None = None) -> PPOConfig:
        return default_config(
            env_name, total_timesteps=self.budget(total_timesteps), **self.overrides
        )


def _drawn_suite(name: str) -> Suite:
    """A suite over a distribution (rl/environments/distributions.py): four train draws, four
    validation draws from another seed range; the test role is the five tabular LPG levels and two
    classic tasks for grid suites (LPG's generalisation claim), four more draws and the
    default CartPole for parameter ranges.

    Budgets: a grid level's lifetime is at most 250 updates of 16 envs x 20 steps (80,000
    steps; rl/lpg/agent.py), which is also the PPO budget there.
    """
    distribution = DISTRIBUTIONS[name]
    if distribution.grid:
        return Suite(
            name,
            envs=distribution.draws(0, 4),
            total_timesteps=80_000,
            short_budget=20_000,
            validation=distribution.draws(VALIDATION_SEEDS, 4),
            heldout=(*TABULAR_LEVELS, "Catch-bsuite", "CartPole-v1"),
            default_seeds=4,
            distribution=distribution,
            description=f"random grid levels ({distribution.base}; validation: other draws; "
            "test: the five tabular LPG levels, Catch, CartPole): GROOVE's setting",
        )
    return Suite(
        name,
        envs=distribution.draws(0, 4),
        total_timesteps=100_000,
        short_budget=20_000,
        validation=distribution.draws(VALIDATION_SEEDS, 4),
        heldout=(*distribution.draws(TEST_SEEDS, 4), distribution.base),
        default_seeds=4,
        distribution=distribution,
        description=f"{distribution.base} with its parameters drawn per environment "
        f"({', '.join(r.field for r in distribution.ranges)})",
    )


# DiscoGen's MinAtar config as a suite's overrides (its budget is the suite's total_timesteps)
_DISCOBENCH_OVERRIDES = {k: v for k, v in DISCOBENCH_MINATAR.items() if k != "total_timesteps"}
# DiscoGen 1.3.0's PPO baseline, domains/OnPolicyRL/utils/baseline_scores.yaml: its greedy
# evaluation at the best of its 10 rates, the `discobench` suite's own scoring
DISCOGEN_BASELINE = {
    "Breakout-MinAtar": 59.52,
    "Asterix-MinAtar": 18.59,
    "Freeway-MinAtar": 62.19,
    "SpaceInvaders-MinAtar": 190.63,
}


# meta-RL task families (rl/meta/tasks.py) and what a trial is on each
TASK_FAMILIES = {
    "bandit-tasks": "two-armed bandits (p, 1-p), trials of 10 pulls",
    "point-tasks": "2D navigation to a hidden goal (MAML's), trials of 3 x 20 steps",
    "pendulum-tasks": "Pendulum with drawn gravity, mass, length; trials of 2 x 100 steps",
}
META_METHODS = {
    "rl2": "RL² (a GRU policy trained by PPO across trials; the candidate is its outer loop)",
    "maml": "MAML (policy-gradient inner steps; the candidate optimizer is the inner rule)",
}
META_SEPARATOR = "@"


def _meta_suite(family: str, method: str) -> Suite:
    """A meta-RL suite `<family>@<method>`: each role is one meta-training run on the family,
    scored by the mean adaptation curve on that role's held-out tasks (rl/meta/loop.py)."""
    name = META_SEPARATOR.join((family, method))
    total = META_CONFIGS[(method, family)]["total_timesteps"]
    return Suite(
        name,
        envs=(MetaEnv(method, family, "train").name,),
        total_timesteps=total,
        short_budget=total // 4,
        validation=(MetaEnv(method, family, "validation").name,),
        heldout=(MetaEnv(method, family, "test").name,),
        default_seeds=4,
        description=f"{TASK_FAMILIES[family]}: {META_METHODS[method]}; scored by adaptation "
        "on held-out tasks",
    )


def meta_suite_name(suite: str, meta: str | None) -> str:
    """The suite `--suite SUITE --meta METHOD` names: `<family>@<method>`.

    Args:
        suite: a suite name, a task family (`pendulum-tasks`) or a meta suite (`x@maml`).
        meta: `rl2`, `maml`, or None (the suite as given).

    Raises:
        UnknownSuite: --meta on a suite that is not a task family, or an unknown method.
    """
    if meta is None:
        return suite
    if meta not in METHODS:
        raise UnknownSuite(f"unknown --meta {meta!r}; choose one of: {', '.join(METHODS)}")
    family = suite.partition(META_SEPARATOR)[0]
    if family not in TASK_FAMILIES:
        raise UnknownSuite(
            f"--meta needs a task family suite ({', '.join(TASK_FAMILIES)}), not {suite!r}"
        )
    return META_SEPARATOR.join((family, meta))


def is_meta_suite(name: str) -> bool:
    return name.partition(META_SEPARATOR)[2] in META_METHODS


SUITES: dict[str, Suite] = {
    suite.name: suite
    for suite in (
        Suite(
            "smoke",
            envs=("CartPole-v1",),
            total_timesteps=50_000,
            short_budget=20_000,
            heldout=(),
            default_seeds=2,
            description="CartPole-v1 at 5e4 steps: seconds per candidate, for tests",
        ),
        Suite(
            "classic",
            envs=("CartPole-v1", "Acrobot-v1"),
            total_timesteps=500_000,
            short_budget=100_000,
            heldout=("SpaceInvaders-MinAtar",),
            validation=("Catch-bsuite", "Breakout-MinAtar"),
            default_seeds=4,
            description="CartPole-v1 and Acrobot-v1 at 5e5 steps (validation: Catch, "
            "Breakout-MinAtar; test: SpaceInvaders-MinAtar): the CPU demo",
        ),
        Suite(
            "minatar",
            # DiscoBench's split: train on Breakout and Freeway, hold out Asterix and
            # SpaceInvaders
            envs=("Breakout-MinAtar", "Freeway-MinAtar"),
            total_timesteps=10_000_000,
            short_budget=1_000_000,
            heldout=("Asterix-MinAtar", "SpaceInvaders-MinAtar"),
            # the fifth MinAtar game, in neither side of DiscoBench's split
            validation=("Seaquest-MinAtar",),
            default_seeds=8,
            description="MinAtar at 1e7 steps, DiscoBench's split (validation: Seaquest): "
            "for a GPU",
            published={
                "learn-rl-algorithms": {
                    "Breakout-MinAtar": 50.08,
                    "Asterix-MinAtar": 15.04,
                    "Freeway-MinAtar": 61.84,
                    "SpaceInvaders-MinAtar": 167.09,
                },
                "DiscoBench": {
                    "Breakout-MinAtar": 69.91,
                    "Asterix-MinAtar": 17.02,
                    "Freeway-MinAtar": 61.82,
                    "SpaceInvaders-MinAtar": 180.88,
                },
                "DiscoGen 1.3.0": DISCOGEN_BASELINE,
            },
        ),
        Suite(
            "discobench",
            # minatar's roles, under DiscoGen's config and scoring
            envs=("Breakout-MinAtar", "Freeway-MinAtar"),
            total_timesteps=DISCOBENCH_MINATAR["total_timesteps"],
            short_budget=1_000_000,
            heldout=("Asterix-MinAtar", "SpaceInvaders-MinAtar"),
            validation=("Seaquest-MinAtar",),
            default_seeds=DISCOBENCH_SEEDS,
            overrides=_DISCOBENCH_OVERRIDES,
            description="DiscoGen 1.3.0's MinAtar OnPolicyRL config (lr 1e-3 on every game; "
            "validation: Seaquest), scored by greedy evaluation over "
            f"{DISCOBENCH_MINATAR['eval_episodes']} episodes: for a GPU",
            published={"DiscoGen 1.3.0": DISCOGEN_BASELINE},
        ),
        *(_drawn_suite(name) for name in ("grid-small", "grid-random", "cartpole-params")),
        *(_meta_suite(family, method) for family in TASK_FAMILIES for method in META_METHODS),
    )
}


# where each published reference comes from: label -> source and version. The numbers differ
# between sources (Breakout: 50.08, 69.91, 59.52), which is why every normalised score that
# selection reads is against this machine's own baseline on the same seeds, and published
# references are shown beside it, labelled, never instead of it.
REFERENCE_SOURCES: dict[str, str] = {
    "learn-rl-algorithms": "learn-rl-algorithms (Goldie et al.), its tuned PPO's MinAtar returns",
    "DiscoBench": "DiscoBench (Goldie et al. 2026), the PPO baseline of its OnPolicyRL tables",
    "DiscoGen 1.3.0": "DiscoGen 1.3.0, domains/OnPolicyRL/utils/baseline_scores.yaml",
}


def suite_names() -> list[str]:
    return list(SUITES)


def published_returns(env_name: str) -> dict[str, float]:
    """The published PPO returns for `env_name` from every suite that has them: label ->
    return ({} for an env without any)."""
    found: dict[str, float] = {}
    for suite in SUITES.values():
        for label, returns in suite.published.items():
            if env_name in returns:
                found.setdefault(label, float(returns[env_name]))
    return found


def get_suite(name: str) -> Suite:
    if name in TASK_FAMILIES:
        raise UnknownSuite(f"{name} is a task family: add --meta rl2|maml (or --suite {name}@rl2)")
    if name not in SUITES:
        raise UnknownSuite(f"unknown suite {name!r}; choose one of: {', '.join(SUITES)}")
    return SUITES[name]
