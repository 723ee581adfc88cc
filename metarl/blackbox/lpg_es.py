"""LPG meta-trained by evolution strategies on grid levels, with a curriculum (GROOVE's LPG-ES).

The ES (evosax's OpenAI-ES, blackbox/es.py: the same run lifecycle, state, resume and exports)
searches the weights of the Learned Policy Gradient network (rl/lpg/network.py). One generation:

    tasks    = curriculum.draw(population / 2)         a task = (grid level, lifetime), by seed
    members  = ES.ask()                                antithetic pairs (i, i + population/2)
    R[m]     = return of agents trained by member m on task m mod population/2
               (vmap over members x training seeds, one compiled program for the whole run)
    fitness  = R[m] - mean(R[m], R[pair of m])         antithetic *task* sampling: a pair
               shares its task, so only its difference says which direction is better; the
               centred ranks then compare differences across tasks of any return scale
    ES.tell(-fitness)
    curriculum.update(tasks, scores)                    uniform: nothing; PLR: the reference
               actor-critic's positive value loss on the level; GROOVE: algorithmic regret,
               reference return - the pair's mean return

The reference is the actor-critic of rl/lpg/agent.py (same agent, lifetime and seeds; GROOVE's
A2C); it is trained once per level, the first time the level is drawn, and cached in the run
state with the curriculum, so a replayed level costs only its LPG agents. Uniform sampling
never trains it.

PLR's score is classically the *agent's* positive value loss; an LPG agent has no value (its y
means whatever the LPG makes it mean), so PLR here scores a level by how much an actor-critic
still has to learn there: a property of the level, where GROOVE's regret is a property of the
level *and* the current LPG.

Every `export_every` generations the ES mean is written as an LPG candidate (data: sizes and
weights, rl/lpg/network.py `lpg_source`) and scored by evaluation/lpg_evaluation.py on the suite's
train draws, validation draws and the test role (the tabular LPG levels, Catch, CartPole) on
fresh recorded seeds; it is archived like any candidate (method es, task lpg).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from metarl.blackbox.es import FAILED_FITNESS, ESError, ESRun, Generation
from metarl.evaluation.lpg_evaluation import LPGEvaluator
from metarl.evaluation.outcome import Outcome
from metarl.evaluation.seeds import SeedSource
from metarl.rl.environments.curriculum import Curriculum, CurriculumConfig, Draw
from metarl.rl.environments.gridworld import GridWorld
from metarl.rl.environments.levels import DISTRIBUTIONS as LEVEL_DISTRIBUTIONS
from metarl.rl.environments.levels import sample_level
from metarl.rl.lpg.agent import AgentConfig, lifetime_from_seed, make_a2c_train, make_lpg_train
from metarl.rl.lpg.network import LPGShape, init_lpg, lpg_source
from metarl.rl.suites import get_suite

logger = logging.getLogger(__name__)

BUFFER_SNAPSHOT = 32  # levels of the buffer kept per generation in the history (by score)


def antithetic_tasks(population: int) -> np.ndarray:
    """The task index of each member: evosax's antithetic pairs are (i, i + population/2),
    and both members of a pair train on task i."""
    return np.arange(population) % (population // 2)


def pair_centred(returns: np.ndarray) -> np.ndarray:
    """Each member's return minus its antithetic pair's mean (see the module docstring); a
    non-finite member gets FAILED_FITNESS and its partner 0.

    Args:
        returns: [population] mean return of each member's agents.

    Returns:
        [population] fitness for the ES (higher is better).
    """
    half = len(returns) // 2
    plus, minus = returns[:half], returns[half:]
    ok = np.isfinite(plus) & np.isfinite(minus)
    diff = np.where(ok, (plus - minus) / 2.0, 0.0)
    fitness = np.concatenate([diff, -diff])
    return np.where(np.isfinite(returns), fitness, FAILED_FITNESS)


class LPGFitness:
    """The generation's fitness with the curriculum's tasks (callable as `es_generation`
    expects); its curriculum and reference cache are part of the run's saved state.

    Args:
        config: the run's ESConfig (resolved).
        shape: the LPG network's sizes.
        state: the curriculum's saved dict (`to_dict`), or None for a fresh one.
    """

    def __init__(self, config, shape: LPGShape, state: dict | None):
        self.config = config
        suite = get_suite(config.suite)
        self.distribution = suite.distribution
        self.levels = LEVEL_DISTRIBUTIONS[self.distribution.base.removeprefix("Grid-")]
        self.max_lifetime = self.distribution.lifetimes[1]
        state = state or {}
        if "curriculum" in state:
            self.curriculum = Curriculum.from_dict(state["curriculum"])
        else:
            self.curriculum = Curriculum(
                CurriculumConfig(
                    kind=config.curriculum,
                    capacity=config.buffer_size,
                    replay_prob=config.replay_prob,
                    staleness_coeff=config.staleness,
                )
            )
        # level seed -> [reference return, reference positive value loss]
        self.references: dict[str, list[float]] = dict(state.get("references", {}))
        self.generation = 0  # set by the run before each call (the curriculum's rng)
        self.last: dict = {}
        env = GridWorld()
        agent = AgentConfig(
            num_envs=config.env_workers,
            max_updates=self.max_lifetime,
            eval_steps=int(self.levels.max_steps[1]),
        )
        train = make_lpg_train(agent, shape, env)
        per_seed = jax.vmap(train, in_axes=(0, None, None, None))
        self._members = jax.jit(jax.vmap(per_seed, in_axes=(None, 0, 0, 0)))
        reference = jax.vmap(make_a2c_train(agent, env), in_axes=(0, None, None))
        self._reference = jax.jit(jax.vmap(reference, in_axes=(None, 0, 0)))
        self._sample = jax.jit(jax.vmap(lambda key: sample_level(key, self.levels)))

    def to_dict(self) -> dict:
        return {"curriculum": self.curriculum.to_dict(), "references": self.references}

    def tasks(self, seeds) -> tuple[Any, jnp.ndarray]:
        """The levels (stacked) and lifetimes of the level seeds `seeds`."""
        keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray(seeds, jnp.uint32))
        lifetimes = [lifetime_from_seed(s, self.distribution.lifetimes) for s in seeds]
        return self._sample(keys), jnp.asarray(lifetimes, jnp.int32)

    def _references_of(self, keys, draw: Draw, levels, lifetimes) -> np.ndarray:
        """[tasks, 2]: each drawn level's reference return and positive value loss, trained
        on this generation's keys for the levels not yet cached (the whole batch is trained
        then, so the program keeps one shape; cached levels keep their first numbers)."""
        missing = [i for i, s in enumerate(draw.seeds) if str(s) not in self.references]
        if missing:
            result = self._reference(keys, levels, lifetimes)
            returns = np.asarray(result.final_return, np.float64).mean(axis=1)
            pvl = np.asarray(result.positive_value_loss, np.float64).mean(axis=1)
            for i in missing:
                self.references[str(draw.seeds[i])] = [float(returns[i]), float(pvl[i])]
        return np.asarray([self.references[str(s)] for s in draw.seeds])

    def __call__(self, keys: jax.Array, population: Any) -> tuple[jax.Array, dict]:
        """Train every member on its pair's task; score the tasks for the curriculum.

        Args:
            keys: [member_seeds] training keys shared by all members (common random numbers).
            population: the ES members (stacked parameter pytrees).

        Returns:
            ([population] fitness, {"returns": [population] mean returns}).
        """
        size = jax.tree.leaves(population)[0].shape[0]
        rng = np.random.default_rng([self.config.rng_seed, self.generation])
        draw = self.curriculum.draw(rng, size // 2)
        levels, lifetimes = self.tasks(draw.seeds)
        index = jnp.asarray(antithetic_tasks(size))
        member_levels = jax.tree.map(lambda x: x[index], levels)
        result = self._members(keys, population, member_levels, lifetimes[index])
        returns = np.asarray(result.final_return, np.float64).mean(axis=1)
        pair_returns = (returns[: size // 2] + returns[size // 2 :]) / 2.0
        scores = np.zeros(size // 2)
        regret = None
        if self.config.curriculum != "uniform":
            references = self._references_of(keys, draw, levels, lifetimes)
            regret = references[:, 0] - pair_returns
            scores = regret if self.config.curriculum == "groove" else references[:, 1]
        self.curriculum.update(draw, [float(x) for x in scores])
        self._prune()
        self.last = {
            "replay": bool(draw.replay),
            "levels": [int(s) for s in draw.seeds],
            "lifetimes": [int(x) for x in np.asarray(lifetimes)],
            "returns": [_number(x) for x in pair_returns],
            "regret": None if regret is None else [_number(x) for x in regret],
            "buffer": [
                [int(e.seed), _number(e.score), int(e.staleness)]
                for e in sorted(self.curriculum.buffer.entries(), key=lambda e: -e.score)[
                    :BUFFER_SNAPSHOT
                ]
            ],
            "buffer_size": int(self.curriculum.buffer.size),
        }
        return jnp.asarray(pair_centred(returns)), {"returns": returns}

    def _prune(self) -> None:
        """Keep the reference cache to the levels the buffer still holds."""
        kept = {str(e.seed) for e in self.curriculum.buffer.entries()}
        self.references = {k: v for k, v in self.references.items() if k in kept}


def _number(x) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


class LPGRun(ESRun):
    """An ES run over the LPG network (`metarl es --task lpg`): ESRun's lifecycle, state,
    resume and exports, with LPGFitness and the LPG evaluator."""

    def __init__(self, config, archive, **kwargs):
        if kwargs.get("initial_mean") is not None:
            raise ESError("an LPG run starts from its network's initialisation (no warm start)")
        super().__init__(config, archive, **kwargs)
        self.factory = kwargs.get("evaluator_factory") or self._evaluator
        self.fitness: LPGFitness | None = None

    @property
    def shape(self) -> LPGShape:
        return LPGShape(
            gru_width=self.config.hidden,
            lifetime_conditioning=self.config.lifetime_conditioning,
        )

    def _task(self):
        return None  # an LPG network is data: no discovery task, no cascade

    def zero_mean(self) -> Any:
        """flax's initialisation with a fixed key: all-zero weights would make every member's
        pi_hat a function of its perturbation alone (a saddle for the ES)."""
        return init_lpg(jax.random.PRNGKey(0), self.shape)

    def check_mean(self, mean: Any) -> None:
        raise ESError("an LPG run starts from its network's initialisation")

    def network_name(self) -> str:
        return "TA-LPG network" if self.config.lifetime_conditioning else "LPG network"

    def mean_source(self, mean: Any, title: str) -> str:
        return lpg_source(mean, self.shape, title)

    def _evaluator(self, settings) -> LPGEvaluator:
        roles = ("train", "validation", "test") if self.config.heldout else ("train", "validation")
        return LPGEvaluator(
            get_suite(self.config.suite),
            SeedSource(self.config.train_seeds, pinned=self.config.seed_values),
            updates=self.config.eval_updates,
            num_envs=self.config.env_workers,
            roles=roles,
            limits=settings.limits(),  # an export is scored under the cascade's limits
        )

    def make_fitness(self, evaluator) -> Callable:
        self.emit("status", {"text": "compiling the LPG agents' training"})
        self.fitness = LPGFitness(self.config, self.shape, self.state.curriculum)
        return self.fitness

    def score_export(self, evaluator, code: str, eval_key: str) -> tuple[Outcome, str | None]:
        """Scored afresh (no reuse: an export's weights are new, and the LPG evaluation's
        lifetime options are not in the cascade's key)."""
        return evaluator.evaluate(code), None

    def step(self, fitness_of, es_state, rng, params) -> tuple[Any, jax.Array, Generation]:
        self.fitness.generation = self.state.generation
        es_state, rng, generation = super().step(fitness_of, es_state, rng, params)
        self.state.history[-1].update(self.fitness.last)
        self.state.curriculum = self.fitness.to_dict()
        logger.info(
            "generation %d levels %s (replay %s), buffer %d",
            generation.generation,
            self.fitness.last["levels"],
            self.fitness.last["replay"],
            self.fitness.last["buffer_size"],
        )
        return es_state, rng, generation
