"""Evaluation protocols: one name for everything a score depends on besides the program.

A score means little without its protocol: which suite (train, validation and test
environments), what budget, how many training seeds, how a would-be incumbent is raced on
validation, and whether the learning rate was swept. DiscoBench (Goldie et al. 2026) reports
each candidate at its best learning rate over 8 seeds on a MinAtar train/test split; today's
CPU demo trains two classic-control environments at 1e5 steps on 2 seeds. Both are protocols
here, recorded with the run (`runs.protocol`, `runs.config`) and shown with every score, so a
leaderboard never puts numbers from different protocols side by side unlabelled.

A protocol fills the run's settings that the user left at their defaults; an explicit option
(`--seeds 4`) overrides it and the run records the result. Where a protocol sweeps learning
rates, the best-LR score is DiscoBench's aggregation and mean-over-LRs the robust one; metarl
picks the rate on validation seeds and measures the test envs at it on fresh seeds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from metarl.errors import USAGE, MetarlError


class UnknownProtocol(MetarlError, KeyError):
    """A protocol name not in PROTOCOLS; the message lists the known ones."""

    exit_code = USAGE


@dataclass(frozen=True)
class Protocol:
    """A named bundle of evaluation settings.

    Attributes:
        name: what runs and scores are labelled with.
        settings: run settings (DiscoverConfig field -> value) the protocol sets.
        description: one line for `--help` and the README.
    """

    name: str
    settings: Mapping[str, object] = field(default_factory=dict)
    description: str = ""


PROTOCOLS: dict[str, Protocol] = {
    protocol.name: protocol
    for protocol in (
        Protocol(
            "quick",
            {"suite": "classic", "timesteps": 100_000, "seeds": 2},
            "the CPU demo: classic suite at 1e5 steps, 2 seeds per proposal, validation raced "
            "on fresh seeds (4 per round, up to 12), test on fresh seeds",
        ),
        Protocol(
            "discobench",
            {
                "suite": "minatar",
                "timesteps": 10_000_000,
                "seeds": 8,
                "confirm_seeds": 8,
                "race_seeds": 32,
                "lr_sweep": "5",
                "lr_aggregation": "best",
            },
            "DiscoBench-style, for a GPU: MinAtar (train Breakout, Freeway; validation "
            "Seaquest; test Asterix, SpaceInvaders) at 1e7 steps, 8 seeds per proposal and "
            "per validation round (up to 32), each game at the best rate of a 5-rate log grid "
            "around its tuned one (x0.32 to x3.2, the baseline swept alike); the test envs at "
            "the rate chosen on validation, on fresh seeds",
        ),
    )
}


def get_protocol(name: str) -> Protocol:
    """The protocol called `name`.

    Raises:
        UnknownProtocol: no such protocol.
    """
    if name not in PROTOCOLS:
        raise UnknownProtocol(f"unknown protocol {name!r}; choose one of: {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]


def protocol_names() -> list[str]:
    return list(PROTOCOLS)
