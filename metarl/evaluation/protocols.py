"""Evaluation protocols: one name for everything a score depends on besides the program.

A score means little without its protocol: which suite (train, validation and test
environments), what budget, how many training seeds, how a would-be incumbent is raced on
validation, and whether the learning rate was swept. DiscoBench (Goldie et al. 2026; DiscoGen
1.3.0's MinAtar OnPolicyRL task, rl/discobench.py) trains each candidate with one config on
every game, 8 seeds at each of 10 learning rates (1e-3 to 1e-2), scores each run by a greedy
evaluation of its final policy over 16 episodes and reports the best rate's mean; today's CPU
demo trains two classic-control environments at 1e5 steps on 2 seeds. Both are protocols
here, recorded with the run (`runs.protocol`, `runs.config`) and shown with every score, so a
leaderboard never puts numbers from different protocols side by side unlabelled.

A protocol fills the run's settings that the user left at their defaults; an explicit option
(`--seeds 4`) overrides it and the run records the result. Where a protocol sweeps learning
rates, the best-LR score is DiscoBench's aggregation and mean-over-LRs the robust one.

Where `discobench` departs from DiscoGen: DiscoGen picks the best rate on the very evaluation
returns it reports (optimistic: the maximum of 10 noisy means); metarl picks the rate on the
validation env's seeds and measures the test envs at that one rate on fresh seeds. The training
envs are scored as DiscoGen scores them (best of the 10 rates, baseline swept alike).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from metarl.errors import USAGE, MetarlError
from metarl.rl.discobench import DISCOBENCH_MINATAR, DISCOBENCH_RATES, DISCOBENCH_SEEDS

# DiscoGen's 10 rates as the comma list `lr_sweep` takes (repr: parse_sweep reads back each
# float exactly, and an explicit list is swept on every env, baseline included)
DISCOBENCH_SWEEP = ",".join(repr(lr) for lr in DISCOBENCH_RATES)


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
            {"suite": "classic", "timesteps": 100_000, "seeds": 2, "stability": 5.0},
            "the CPU demo: classic suite at 1e5 steps, 2 seeds per proposal, validation raced "
            "on fresh seeds (4 per round, up to 12), the winner checked at 5x the budget "
            "(refused when significantly worse there), test on fresh seeds",
        ),
        Protocol(
            "minatar-cpu",
            {
                "suite": "discobench",
                "timesteps": 1_000_000,
                "short_timesteps": 250_000,
                "seeds": 2,
                "confirm_seeds": 4,
                "race_seeds": 8,
                "fidelity": "rungs",
                # no stability check: a race round (2 programs x 4 seeds x 1e6 steps of
                # Seaquest, the validation game) took 13 min 19 s from a cold cache on 2 quiet
                # cores (the baseline's 4 seeds, one vmapped program on one core, ~5 min; then
                # both programs at once, ~7.5 min; RESULTS.md), and a 2x check would add a
                # round twice as long per race
                # a stage's wall-clock cap: a validation round's programs run ~440 s quiet and
                # 2-3x that on a busy machine, past the default 900 s
                "timeout": 3600.0,
            },
            "DiscoGen's MinAtar games and config for 2 CPU cores: train Breakout, Freeway; "
            "validation Seaquest; test Asterix, SpaceInvaders; 1e6 steps (122 PPO updates, "
            "where PPO learns), 2 seeds per proposal, validation raced on 4 fresh seeds per "
            "round (up to 8; ~13 minutes a round on 2 cores, 5 of them the baseline's), rungs on, "
            "greedy evaluation over 16 episodes; one learning rate (DiscoGen's 1e-3)",
        ),
        Protocol(
            "discobench",
            {
                "suite": "discobench",
                "timesteps": DISCOBENCH_MINATAR["total_timesteps"],
                "seeds": DISCOBENCH_SEEDS,
                "confirm_seeds": 8,
                "race_seeds": 32,
                "lr_sweep": DISCOBENCH_SWEEP,
                "lr_aggregation": "best",
            },
            "DiscoGen 1.3.0's MinAtar OnPolicyRL, for a GPU: its config (train Breakout, "
            "Freeway; validation Seaquest; test Asterix, SpaceInvaders) at 1e7 steps, 8 seeds "
            "per proposal and per validation round (up to 32), each run scored by a greedy "
            "evaluation over 16 episodes, each game at the best of DiscoGen's 10 rates (1e-3 "
            "to 1e-2, the baseline swept alike); the test envs at the rate chosen on "
            "validation, on fresh seeds",
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
