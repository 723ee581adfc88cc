"""Named environment suites: the user's vocabulary for "train on what, for how long".

A suite has training environments (what selection sees) and held-out environments (scored
for the leaderboard only). Budgets are per environment; `short_budget` is the cascade's cheap
first look at the first training environment. A suite may carry published PPO returns
(`published`: source label -> env -> mean final return) that scores are also normalised
against, next to this machine's own baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from metarl.errors import USAGE, MetarlError
from metarl.rl.configs import PPOConfig, default_config

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
    heldout: tuple[str, ...] = ()
    default_seeds: int = 4
    overrides: dict = field(default_factory=dict)
    description: str = ""
    published: PublishedReturns = field(default_factory=dict)

    def config(self, env_name: str, total_timesteps: int | None = None) -> PPOConfig:
        return default_config(
            env_name, total_timesteps=total_timesteps or self.total_timesteps, **self.overrides
        )


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
            heldout=("Catch-bsuite",),
            default_seeds=4,
            description="CartPole-v1 and Acrobot-v1 at 5e5 steps: the CPU demo",
        ),
        Suite(
            "minatar",
            # DiscoBench's split: train on Breakout and Freeway, hold out Asterix and
            # SpaceInvaders
            envs=("Breakout-MinAtar", "Freeway-MinAtar"),
            total_timesteps=10_000_000,
            short_budget=1_000_000,
            heldout=("Asterix-MinAtar", "SpaceInvaders-MinAtar"),
            default_seeds=8,
            description="MinAtar at 1e7 steps, DiscoBench's split: for a GPU",
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
            },
        ),
    )
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
    if name not in SUITES:
        raise UnknownSuite(f"unknown suite {name!r}; choose one of: {', '.join(SUITES)}")
    return SUITES[name]
