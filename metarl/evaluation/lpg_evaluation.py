"""Scoring a Learned Policy Gradient network: agents trained by it, on every role of a suite.

An LPG candidate is data (rl/lpg.py `lpg_source`: sizes and base64 weights), read with `ast`
and never executed, so it is trained here by metarl's own code, in this process, without a
sandbox: there is no candidate code to contain. What stays the same as for every other
candidate is the score's meaning (evaluation/outcome.py): per environment, the agents' final
returns on training seeds drawn fresh and recorded (`SeedSource`), normalised so that 0 is the
uniform policy and 1 is the reference, the actor-critic of rl/lpg_agent.py with the same agent,
budget and seeds (GROOVE's comparison); per role, the IQM/mean aggregate with a bootstrap
interval (`score_roles`). The test role (the tabular LPG levels, Catch, CartPole) is reported,
never read by the ES.

Lifetimes: a drawn grid level is trained for the lifetime its seed fixes (TA-LPG's task); a
named level or a gymnax environment for `updates` (default: the longest lifetime of the suite's
distribution, 250 updates; GROOVE evaluates its tabular levels at 2,500 updates of 64 envs, a
GPU's budget: `--eval-updates 2500`); on a suite without a distribution (classic, minatar:
`metarl evaluate --task lpg --suite classic`) for the suite's per-env budget in updates.
"""

from __future__ import annotations

import logging
import time
from typing import Sequence

import jax
import numpy as np

from metarl.evaluation.outcome import EnvScore, Outcome, score_roles
from metarl.evaluation.seeds import SeedSource
from metarl.rl.environments import make_env, split_variant
from metarl.rl.lpg import LPGShape, read_lpg_source
from metarl.rl.lpg_agent import (
    AgentConfig,
    agent_config_for,
    lifetime_from_seed,
    make_a2c_train,
    make_lpg_train,
    make_random_return,
)
from metarl.rl.scoring import normalised_score
from metarl.rl.suites import Suite

logger = logging.getLogger(__name__)


def env_lifetime(
    suite: Suite, env_name: str, updates: int | None, steps_per_update: int = 16 * 20
) -> int:
    """The lifetime (agent updates) an LPG agent gets on `env_name` when scored.

    Args:
        suite: the suite the env belongs to.
        env_name: a drawn grid level (its seed fixes its lifetime), or any other env.
        updates: the lifetime of the others; None: the distribution's longest lifetime, or
            for a suite without one (classic, minatar) its per-env budget in updates.
        steps_per_update: environment steps of one agent update (envs x rollout length).

    Returns:
        The number of updates.
    """
    distribution = suite.distribution
    lifetimes = distribution.lifetimes if distribution is not None else None
    base, changes = split_variant(env_name)
    if lifetimes and distribution.base == base and "level" in changes:
        return lifetime_from_seed(int(changes["level"]), lifetimes)
    if updates:
        return int(updates)
    if lifetimes:
        return int(lifetimes[1])
    return max(1, suite.total_timesteps // steps_per_update)


def _finite(value: float) -> float | None:
    return value if np.isfinite(value) else None


class LPGEvaluator:
    """Scores LPG candidates on a suite's roles (the interface ES exports use: `evaluate_batch`,
    `close`).

    Args:
        suite: the suite whose train/validation/test environments are scored.
        seeds: where each evaluation's training seeds come from (drawn fresh, or pinned).
        updates: lifetime on named levels and gymnax environments (None: see `env_lifetime`).
        num_envs: parallel environments per agent.
        roles: the roles to score (test may be left out).
    """

    def __init__(
        self,
        suite: Suite,
        seeds: SeedSource,
        updates: int | None = None,
        num_envs: int = 16,
        roles: Sequence[str] = ("train", "validation", "test"),
    ):
        self.suite = suite
        self.seeds = seeds
        self.updates = updates
        self.num_envs = num_envs
        self.roles = tuple(roles)
        self._programs: dict[tuple, tuple] = {}
        self._references: dict[tuple, tuple[np.ndarray, float]] = {}

    def close(self) -> None:
        self._programs.clear()

    def __enter__(self) -> "LPGEvaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def evaluate_batch(self, sources: Sequence[str], task: str = "lpg", **_) -> list[Outcome]:
        """Each source's outcome (see `evaluate`); the cascade's other options (progress,
        fingerprints) do not apply."""
        return [self.evaluate(source) for source in sources]

    def _program(self, env_name: str, shape: LPGShape, lifetime: int):
        key = (env_name, shape, lifetime)
        if key not in self._programs:
            env = make_env(env_name)
            config = agent_config_for(env_name, lifetime, self.num_envs, env.max_steps or None)
            train = make_lpg_train(config, shape, env.env)
            reference = make_a2c_train(config, env.env)
            random_return = make_random_return(config, env.env)
            self._programs[key] = (
                env.params,
                jax.jit(jax.vmap(train, in_axes=(0, None, None, None))),
                jax.jit(jax.vmap(reference, in_axes=(0, None, None))),
                jax.jit(jax.vmap(random_return, in_axes=(0, None))),
                config,
            )
        return self._programs[key]

    def _reference(self, env_name, shape, lifetime, seeds: tuple[int, ...]):
        """(actor-critic final returns per seed, random policy's mean return) on `seeds`."""
        key = (env_name, lifetime, seeds)
        if key not in self._references:
            params, _, reference, random_return, _ = self._program(env_name, shape, lifetime)
            keys = jax.vmap(jax.random.PRNGKey)(np.asarray(seeds))
            ref = np.asarray(reference(keys, params, lifetime).final_return, np.float64)
            rand = float(np.mean(np.asarray(random_return(keys, params))))
            self._references[key] = (ref, rand)
        return self._references[key]

    def evaluate(self, source: str) -> Outcome:
        """Train agents with the LPG network `source` on every role's environments.

        Returns:
            The outcome: failed at "static" for a text that is not an LPG network, at "full"
            when an agent's training went non-finite; else passed, with one EnvScore per env.
        """
        try:
            shape, params = read_lpg_source(source)
        except ValueError as error:
            return Outcome.failure("static", f"not an LPG network: {error}")
        seeds = self.seeds.draw()
        keys = jax.vmap(jax.random.PRNGKey)(np.asarray(seeds.values))
        scores: list[EnvScore] = []
        roles = self.suite.roles()
        for role in self.roles:
            for env_name in roles[role]:
                lifetime = env_lifetime(
                    self.suite, env_name, self.updates, self.num_envs * AgentConfig().rollout_len
                )
                start = time.perf_counter()
                env_params, train, _, _, config = self._program(env_name, shape, lifetime)
                result = train(keys, params, env_params, lifetime)
                returns = np.asarray(result.final_return, np.float64)
                run_s = time.perf_counter() - start
                if not np.all(np.isfinite(returns)):
                    return Outcome.failure(
                        "full", f"an agent trained by this LPG went non-finite on {env_name}"
                    )
                ref, rand = self._reference(env_name, shape, lifetime, seeds.values)
                steps = lifetime * config.num_envs * config.rollout_len
                scores.append(
                    EnvScore(
                        env=env_name,
                        seeds=seeds.as_list(),
                        total_timesteps=steps,
                        returns=returns.tolist(),
                        mean=float(returns.mean()),
                        std=float(returns.std()),
                        normalised=_finite(
                            normalised_score(float(returns.mean()), rand, float(ref.mean()))
                        ),
                        baseline_mean=float(ref.mean()),
                        random_mean=rand,
                        run_s=run_s,
                        steps_per_s=steps * len(seeds) / max(run_s, 1e-9),
                        role=role,
                    )
                )
                logger.info("LPG on %s (%s): %.3f", env_name, role, scores[-1].mean)
        outcome = Outcome(passed=True, stage="full", env_scores=scores, seeds_pinned=seeds.pinned)
        score_roles(outcome)
        return outcome


def lpg_evaluator(suite: Suite, settings) -> "LPGEvaluator":
    """The LPG evaluator `metarl evaluate --task lpg` uses: the cascade settings' seeds and
    roles; lifetimes from a grid suite's distribution, or from the budget (`--timesteps`, else
    the suite's) on the others: LPG's generalisation claim is that a network meta-trained on
    grid levels trains agents on classic control and MinAtar (`--suite classic`, `minatar`)."""
    roles = ["train"]
    if settings.validation and suite.validation:
        roles.append("validation")
    if settings.heldout and suite.heldout:
        roles.append("test")
    seeds = SeedSource(settings.seeds, pinned=settings.seed_values)
    per_update = 16 * AgentConfig().rollout_len
    budget = settings.total_timesteps
    updates = max(1, budget // per_update) if budget and suite.distribution is None else None
    return LPGEvaluator(suite, seeds, updates=updates, roles=roles)
