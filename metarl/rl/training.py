"""Run one PPO configuration over several seeds (vmapped) and summarise it.

This is the unit every higher layer uses: the cascade's short and full runs, the baseline
cache, benchmarks. Compilation is timed apart from execution (jit's lower/compile), so the
numbers separate XLA's fixed cost from training throughput.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from metarl.rl.components import Components
from metarl.rl.configs import PPOConfig, program_key
from metarl.rl.environments.registry import make_env
from metarl.rl.meta.names import is_meta
from metarl.rl.trainers import make_train, make_trainer


@dataclass
class EnvRun:
    """The outcome of training on one environment, over seeds."""

    env: str
    seeds: list[int]
    total_timesteps: int
    # per seed: mean return of episodes ended in the last 10% of updates, or with the config's
    # eval_episodes the mean greedy return of the final policy (ppo.greedy_returns)
    final_returns: list[float]
    curve_steps: list[int]
    curve: list[float]  # mean over seeds, downsampled learning curve
    compile_s: float
    run_s: float
    curve_std: list[float] = field(default_factory=list)  # std over seeds at each curve point
    nonfinite_update: int | None = None  # first update (any seed) with a NaN/inf loss or param
    # the *position* of that seed in `seeds`, never its value: reasons quote it, and a training
    # seed's value is a secret of the run's pool (evaluation/seeds.py)
    nonfinite_seed_index: int | None = None
    negative_drift_update: int | None = None  # first update (any seed) with drift < -tolerance
    negative_drift_seed_index: int | None = None
    min_drift: float | None = None  # the smallest drift value seen in any minibatch
    # per seed: PLR's positive value loss, mean max(GAE advantage, 0) over the same last 10% of
    # updates (ppo.positive_value_loss); None where not finite; empty in runs cached before it
    positive_value_loss: list[float | None] = field(default_factory=list)
    # per seed: a meta-RL run's adaptation curve on held-out tasks (RL²: the mean return at each
    # episode of a trial; MAML: after 0..K inner gradient steps); None where not finite; empty
    # for runs without one (PPO, and runs cached before it was recorded)
    adaptation: list[list[float | None]] = field(default_factory=list)
    # per seed: PPO trained from scratch with the same experience on the same held-out tasks
    # (rl/scratch.py), the adaptation curve's paired, candidate-independent reference (same
    # points); None where not finite; empty for runs without one
    scratch: list[list[float | None]] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    @property
    def mean(self) -> float:
        return float(np.mean(self.final_returns))

    @property
    def std(self) -> float:
        return float(np.std(self.final_returns))

    @property
    def adaptation_mean(self) -> list[float | None]:
        """The adaptation curve's mean over seeds at each point, ignoring seeds whose value is
        None there (None where no seed has one); [] for a run without a curve."""
        return _curve_mean(self.adaptation)

    @property
    def scratch_mean(self) -> list[float | None]:
        """The from-scratch reference curve's mean over seeds, as `adaptation_mean`."""
        return _curve_mean(self.scratch)

    @property
    def steps_per_s(self) -> float:
        return len(self.seeds) * self.total_timesteps / self.run_s if self.run_s > 0 else math.nan

    @property
    def finite(self) -> bool:
        return self.nonfinite_update is None

    @classmethod
    def from_dict(cls, data: dict) -> "EnvRun":
        """An EnvRun from `to_dict`'s fields; derived and unknown keys (an entry cached by an
        older release) are left out."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(mean=self.mean, std=self.std, steps_per_s=self.steps_per_s)
        return d


def _nan_to_none(values) -> list:
    return [None if not np.isfinite(v) else float(v) for v in values]


def seed_keys(seeds: Sequence[int]) -> jax.Array:
    return jax.numpy.stack([jax.random.PRNGKey(int(s)) for s in seeds])


def _first_event(first_update: jax.Array) -> tuple[int | None, int | None]:
    """(update, seed index) of the earliest recorded event over seeds (-1 = none), or (None,
    None). The index, not the seed's value: see `EnvRun.nonfinite_seed_index`."""
    first = np.asarray(first_update)
    hit = np.flatnonzero(first >= 0)
    if not hit.size:
        return None, None
    worst = hit[np.argmin(first[hit])]
    return int(first[worst]), int(worst)


def summarise(
    config: PPOConfig,
    seeds: list[int],
    result,
    updates: int,
    compile_s: float,
    run_s: float,
) -> EnvRun:
    """An EnvRun from a vmapped TrainResult after `updates` updates."""
    returns = np.asarray(result.episode_return)  # [seeds, points]
    nonfinite_update, nonfinite_index = _first_event(result.first_nonfinite_update)
    negative_update, negative_index = _first_event(result.first_negative_drift_update)
    min_drift = float(np.min(np.asarray(result.min_drift)))
    steps = np.asarray(result.steps)[0]
    reached = int(np.searchsorted(steps, updates * config.batch_size, side="right"))
    with warnings.catch_warnings():  # a bucket where no seed finished an episode stays NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        curve = np.nanmean(returns[:, :reached], axis=0)
        curve_std = np.nanstd(returns[:, :reached], axis=0)
    return EnvRun(
        env=config.env_name,
        seeds=seeds,
        total_timesteps=updates * config.batch_size,
        final_returns=[float(x) for x in np.asarray(result.final_return)],
        curve_steps=[int(s) for s in steps[:reached]],
        curve=_nan_to_none(curve),
        curve_std=_nan_to_none(curve_std),
        compile_s=compile_s,
        run_s=run_s,
        nonfinite_update=nonfinite_update,
        nonfinite_seed_index=nonfinite_index,
        negative_drift_update=negative_update,
        negative_drift_seed_index=negative_index,
        min_drift=min_drift if math.isfinite(min_drift) else None,
        positive_value_loss=_nan_to_none(np.asarray(result.positive_value_loss)),
        adaptation=_seed_curves(result, "adaptation"),
        scratch=_seed_curves(result, "scratch"),
    )


def _seed_curves(result, name: str) -> list[list[float | None]]:
    """A vmapped result's per-seed curves `name` ("adaptation", "scratch"), None where not
    finite; [] when the trainer records none (the field is absent or None: PPO, LPG).

    Raises:
        ValueError: curves that are not shaped [seeds, points].
    """
    value = getattr(result, name, None)
    if value is None:
        return []
    curves = np.asarray(value, np.float64)
    if curves.ndim != 2:
        raise ValueError(f"{name} must be shaped [seeds, points], not {curves.shape}")
    return [_nan_to_none(row) for row in curves]


def _curve_mean(rows: list[list[float | None]]) -> list[float | None]:
    """Per-seed curves' mean at each point, ignoring seeds whose value is None there (None
    where no seed has one); [] without curves."""
    if not rows:
        return []
    values = np.array([[math.nan if v is None else v for v in row] for row in rows], np.float64)
    with warnings.catch_warnings():  # a point no seed has is NaN, then None
        warnings.simplefilter("ignore", RuntimeWarning)
        return _nan_to_none(np.nanmean(values, axis=0))


Select = Callable[[jax.Array], Components]


def env_level(config: PPOConfig):
    """The params of `config`'s env as a program input when the env is one member of a family
    (`FlatDiscreteEnv.level`: a grid level, a gymnax variant); None otherwise (meta-RL too)."""
    return None if is_meta(config.env_name) else make_env(config.env_name).level


def _init_seeds(trainer, keys, level):
    """`trainer.init` vmapped over seeds' keys, every seed on the same `level` (None: the
    config's env's own params)."""
    if level is None:
        return jax.vmap(trainer.init)(keys)
    return jax.vmap(trainer.init, in_axes=(0, None))(keys, level)


def batch_functions(
    config: PPOConfig, select: Select, scratch: bool = True
) -> tuple[Callable, Callable]:
    """The two functions a BatchProgram compiles, `init(keys, index, level=None)` and
    `segment(runner, index, stop)`, vmapped over seeds; shared with the trainer's pre-flight
    (evaluation/preflight.py), which traces them to find where a candidate is called.
    `scratch`: as trainers.make_trainer. `level`: the params of the family member trained on
    (`env_level`); the runner carries it, so `segment` does not take it."""

    def init(keys, index, level=None):
        return _init_seeds(make_trainer(config, select(index), scratch=scratch), keys, level)

    def segment(runner, index, stop):
        trainer = make_trainer(config, select(index), scratch=scratch)
        return jax.vmap(trainer.segment, in_axes=(0, None))(runner, stop)

    return init, segment


def sweep_batch_functions(
    config: PPOConfig, select: Select, scratch: bool = True
) -> tuple[Callable, Callable]:
    """`batch_functions` with the learning rate as one more vmapped input.

    Returns:
        `init(keys, lrs, index)` and `segment(runner, lrs, index, stop)`, vmapped over rows:
        row r trains with key `keys[r]` at peak learning rate `lrs[r]` (a traced float32 that
        `make_trainer(..., lr=)` builds the optimizer's schedule from, inside the vmap).
    """

    def init(keys, lrs, index, level=None):
        def row(key, lr):
            trainer = make_trainer(config, select(index), lr=lr, scratch=scratch)
            return trainer.init(key) if level is None else trainer.init(key, level)

        return jax.vmap(row)(keys, lrs)

    def segment(runner, lrs, index, stop):
        def row(runner, lr):
            trainer = make_trainer(config, select(index), lr=lr, scratch=scratch)
            return trainer.segment(runner, stop)

        return jax.vmap(row)(runner, lrs)

    return init, segment


def sweep_rows(
    seeds: Sequence[int], learning_rates: Sequence[float]
) -> tuple[jax.Array, jax.Array]:
    """The rows of a learning-rate sweep: every learning rate paired with every seed.

    Args:
        seeds: the S training seeds.
        learning_rates: the L peak learning rates.

    Returns:
        `(keys, lrs)`, each with L x S rows: row r is learning rate `r // S` on seed `r % S`
        (the seeds' keys repeat once per learning rate; lrs are float32).
    """
    keys = seed_keys(seeds)
    lrs = jnp.asarray([float(lr) for lr in learning_rates], jnp.float32)
    return jnp.tile(keys, (len(learning_rates), 1)), jnp.repeat(lrs, len(seeds))


def _check_learning_rates(learning_rates: Sequence[float]) -> tuple[float, ...]:
    values = tuple(float(lr) for lr in learning_rates)
    if not values:
        raise ValueError("a learning-rate sweep needs at least one learning rate")
    if not all(math.isfinite(lr) and lr > 0 for lr in values):
        raise ValueError(f"learning rates must be finite and positive, got {list(values)}")
    return values


def sweep_config(config: PPOConfig, lr: float) -> PPOConfig:
    """The config a swept row trains with: `config` at peak learning rate `lr`."""
    return config.replace(lr=float(lr))


def _label_sweep_run(run: EnvRun, config: PPOConfig) -> EnvRun:
    """Record which learning rate a swept EnvRun trained at (EnvRun carries the env name, not
    the config): `extra["lr"]` and the `extra["config_hash"]` of `config.replace(lr=lr)`."""
    run.extra["lr"] = config.lr
    run.extra["config_hash"] = config.config_hash()
    return run


class BatchProgram:
    """One compiled PPO program for a batch of candidates on one config and set of seeds.

    `select(index)` returns the Components of candidate `index` for a traced int32 index (a
    `lax.switch` over the batch's functions, built by the task). The program is vmapped over
    seeds only: each candidate's run is its own call of the shared program, so its numbers do
    not depend on its batch-mates or its position (tested bit for bit), a NaN stays with its
    candidate, and a candidate stopped after a segment simply is not called again. Compiled
    once (`init` and `segment`, with the stop update a traced value), whatever the batch size.

    Why calls rather than `vmap` over candidates: on the 2-core CPU a vmapped batch gains no
    parallelism and its float rounding depends on the batch; `lax.map` would tie every
    candidate to the slowest segment plan. See benchmarks/RESULTS.md for the measurements.

    A learning-rate sweep (`learning_rates` given) adds one vmapped axis: the program runs
    L x S rows (row r: learning rate r // S on seed r % S, see `sweep_rows`), the learning rate
    a traced input of each row, so all L rates share one compiled program. Its results come
    per learning rate from `advance_sweep` / `advance_sweep_per_seed`.

    Numerics of a sweep: the traced rate changes no bit (a row equals the same row of a plain
    program at that rate vmapped over as many rows), but a plain program over the S seeds alone
    is a different batch shape, which XLA's CPU kernels round differently: the weights differ
    by a few float32 ulps per update, and over a long run that grows into different (equally
    valid) trajectories. So a swept rate is not the cached baseline run at that rate bit for
    bit; compare sweeps with sweeps.
    """

    def __init__(
        self,
        config: PPOConfig,
        select: Select,
        size: int,
        seeds: Sequence[int],
        learning_rates: Sequence[float] | None = None,
        scratch: bool = True,
    ):
        """Compile the program.

        Args:
            config: the PPO config (for a sweep, every field but `lr`).
            select: candidate index (traced int32) -> Components.
            size: the number of candidates `select` chooses from.
            seeds: the training seeds.
            learning_rates: None for a plain program (vmapped over seeds, `config.lr`), or
                the L peak learning rates of a sweep (vmapped over L x S rows).
            scratch: a meta-RL program also trains its from-scratch reference (False: a
                candidate's program, whose reference is its baseline's).
        """
        self.config = config
        self.size = int(size)
        self.seeds = [int(s) for s in seeds]
        self._keys = seed_keys(self.seeds)
        self._level = env_level(config)
        index = jnp.asarray(0, jnp.int32)
        start = time.perf_counter()
        if learning_rates is None:
            self.learning_rates = None
            self._lrs = None
            init, segment = batch_functions(config, select, scratch)
            self._init = jax.jit(init).lower(self._keys, index, self._level).compile()
            runner_shape = jax.eval_shape(init, self._keys, index, self._level)
            self._segment = jax.jit(segment).lower(runner_shape, index, index).compile()
        else:
            self.learning_rates = _check_learning_rates(learning_rates)
            self._keys, self._lrs = sweep_rows(self.seeds, self.learning_rates)
            init, segment = sweep_batch_functions(config, select, scratch)
            self._init = jax.jit(init).lower(self._keys, self._lrs, index, self._level).compile()
            runner_shape = jax.eval_shape(init, self._keys, self._lrs, index, self._level)
            self._segment = jax.jit(segment).lower(runner_shape, self._lrs, index, index).compile()
        self.compile_s = time.perf_counter() - start

    def on(self, config: PPOConfig) -> "BatchProgram":
        """This compiled program training on `config`'s env instead: another member of the
        same family (`program_key`), its level an input, so nothing is compiled. Runs it
        starts are summarised with `config`.

        Raises:
            ValueError: `config` needs another program.
        """
        if config == self.config:
            return self
        if program_key(config) != program_key(self.config):
            raise ValueError(
                f"the program compiled for {self.config.env_name} cannot train "
                f"{config.env_name}: another family or config"
            )
        other = copy.copy(self)
        other.config, other._level = config, env_level(config)
        other.compile_s = 0.0  # compiled once, for the member it was built for
        return other

    @property
    def sweeps(self) -> bool:
        """Whether this program sweeps learning rates."""
        return self.learning_rates is not None

    def start(self, index: int):
        """The initial (device-resident) state of candidate `index` on every seed (on every
        learning rate x seed row, for a sweep)."""
        index = jnp.asarray(index, jnp.int32)
        if self.sweeps:
            return self._init(self._keys, self._lrs, index, self._level)
        return self._init(self._keys, index, self._level)

    def advance(self, runner, index: int, stop: int) -> tuple[object, EnvRun]:
        """Train candidate `index` from where `runner` is up to update `stop`.

        Returns:
            The new state and the run summarised so far (its final return: the episodes ended
            in the last 10% of this segment's updates); `compile_s` is 0 (see `compile_s`).
        """
        self._require(sweep=False)
        runner, result, run_s = self._run_segment(runner, index, stop)
        return runner, summarise(self.config, self.seeds, result, int(stop), 0.0, run_s)

    def advance_per_seed(self, runner, index: int, stop: int) -> tuple[object, list[EnvRun]]:
        """`advance`, summarised once per seed (each EnvRun holds one seed): how baselines are
        cached, per (config, seed). Each seed's numbers are those of the vmapped run."""
        self._require(sweep=False)
        runner, result, run_s = self._run_segment(runner, index, stop)
        return runner, self._per_seed(self.config, result, int(stop), run_s)

    def advance_sweep(self, runner, index: int, stop: int) -> tuple[object, list[EnvRun]]:
        """`advance` for a sweep: train every learning rate x seed row up to update `stop`.

        Args:
            runner: the state from `start` or the previous `advance_sweep`.
            index: the candidate.
            stop: the update to stop at.

        Returns:
            The new state and one EnvRun per learning rate (in `learning_rates` order), each
            over all seeds, summarised with `config.replace(lr=lr)`: `extra["lr"]` and
            `extra["config_hash"]` name the learning rate. `run_s` is the wall time of the
            whole sweep's call (shared by the learning rates); `compile_s` is 0.
        """
        self._require(sweep=True)
        runner, result, run_s = self._run_segment(runner, index, stop)
        runs = []
        for position, lr in enumerate(self.learning_rates):
            config = sweep_config(self.config, lr)
            rows = self._lr_rows(result, position)
            run = summarise(config, self.seeds, rows, int(stop), 0.0, run_s)
            runs.append(_label_sweep_run(run, config))
        return runner, runs

    def advance_sweep_per_seed(
        self, runner, index: int, stop: int
    ) -> tuple[object, list[list[EnvRun]]]:
        """`advance_sweep`, summarised once per learning rate and seed.

        Returns:
            The new state and `runs[lr][seed]` (orders of `learning_rates` and `seeds`), each
            EnvRun holding one seed, labelled with its learning rate as in `advance_sweep`.
        """
        self._require(sweep=True)
        runner, result, run_s = self._run_segment(runner, index, stop)
        runs = []
        for position, lr in enumerate(self.learning_rates):
            config = sweep_config(self.config, lr)
            rows = self._lr_rows(result, position)
            per_seed = self._per_seed(config, rows, int(stop), run_s)
            runs.append([_label_sweep_run(run, config) for run in per_seed])
        return runner, runs

    def _lr_rows(self, result, position: int):
        """The S rows of learning rate `position` out of the L x S rows of a sweep."""
        first = position * len(self.seeds)
        return jax.tree.map(lambda x: x[first : first + len(self.seeds)], result)

    def _per_seed(self, config, result, stop: int, run_s: float) -> list[EnvRun]:
        """One EnvRun per seed out of S rows of `result`."""
        runs = []
        for position, seed in enumerate(self.seeds):
            alone = jax.tree.map(lambda x, p=position: x[p : p + 1], result)
            runs.append(summarise(config, [seed], alone, stop, 0.0, run_s))
        return runs

    def _require(self, sweep: bool) -> None:
        if sweep and not self.sweeps:
            raise ValueError("advance_sweep needs a program built with learning_rates")
        if not sweep and self.sweeps:
            raise ValueError("this program sweeps learning rates: use advance_sweep")

    def _run_segment(self, runner, index: int, stop: int):
        start = time.perf_counter()
        index, stop = jnp.asarray(index, jnp.int32), jnp.asarray(stop, jnp.int32)
        if self.sweeps:
            runner, result = self._segment(runner, self._lrs, index, stop)
        else:
            runner, result = self._segment(runner, index, stop)
        result = jax.block_until_ready(result)
        return runner, result, time.perf_counter() - start


def run_training(config: PPOConfig, components: Components, seeds: Sequence[int]) -> EnvRun:
    """Train `components` with `config` on every seed at once and summarise the returns."""
    seeds = [int(s) for s in seeds]
    keys = seed_keys(seeds)
    train = jax.jit(jax.vmap(make_train(config, components)))

    start = time.perf_counter()
    compiled = train.lower(keys).compile()
    compile_s = time.perf_counter() - start

    start = time.perf_counter()
    result = jax.block_until_ready(compiled(keys))
    run_s = time.perf_counter() - start
    return summarise(config, seeds, result, config.num_updates, compile_s, run_s)


def run_sweep(
    config: PPOConfig,
    components: Components,
    seeds: Sequence[int],
    learning_rates: Sequence[float],
) -> list[EnvRun]:
    """`run_training` at every learning rate at once: one program vmapped over L x S rows.

    Args:
        config: the PPO config (every field but `lr`, which each learning rate replaces).
        components: the algorithm components to train.
        seeds: the training seeds (the same seeds at every learning rate).
        learning_rates: the L peak learning rates.

    Returns:
        One EnvRun per learning rate, in order, each over all seeds and labelled with
        `extra["lr"]` and the `extra["config_hash"]` of `config.replace(lr=lr)`. `compile_s`
        and `run_s` are those of the one shared program (not divided among the rates).
        The numbers equal `run_training` at each rate up to the float rounding of a larger
        vmapped batch (see BatchProgram), not bit for bit.
    """
    seeds = [int(s) for s in seeds]
    learning_rates = _check_learning_rates(learning_rates)
    keys, lrs = sweep_rows(seeds, learning_rates)

    def row(key, lr):
        trainer = make_trainer(config, components, lr=lr)
        _, result = trainer.segment(trainer.init(key), config.num_updates)
        return result

    start = time.perf_counter()
    compiled = jax.jit(jax.vmap(row)).lower(keys, lrs).compile()
    compile_s = time.perf_counter() - start

    start = time.perf_counter()
    result = jax.block_until_ready(compiled(keys, lrs))
    run_s = time.perf_counter() - start
    runs = []
    for position, lr in enumerate(learning_rates):
        lr_config = sweep_config(config, lr)
        first = position * len(seeds)
        rows = jax.tree.map(lambda x, f=first: x[f : f + len(seeds)], result)
        run = summarise(lr_config, seeds, rows, config.num_updates, compile_s, run_s)
        runs.append(_label_sweep_run(run, lr_config))
    return runs


@lru_cache(maxsize=None)
def random_policy_return(env_name: str, episodes: int = 64, rng_seed: int = 0) -> float:
    """Mean episodic return of the uniform random policy, computed in JAX (cheap; memoised)."""
    if is_meta(env_name):
        # lazy: the meta-RL learners import this module's neighbours (ppo)
        from metarl.rl.meta.envs import random_adaptation_return

        return random_adaptation_return(env_name, rng_seed)
    env = make_env(env_name)
    horizon = env.max_steps or 1000

    def episode(key):
        key_reset, key_run = jax.random.split(key)
        obs, state = env.reset(key_reset)

        def step(carry, key):
            state, total, alive = carry
            key_action, key_step = jax.random.split(key)
            action = jax.random.randint(key_action, (), 0, env.num_actions)
            out = env.step(key_step, state, action)
            total = total + alive * out.reward
            alive = alive * (1.0 - jnp.logical_or(out.terminated, out.truncated))
            return (out.state, total, alive), None

        (_, total, _), _ = jax.lax.scan(
            step, (state, jnp.float32(0.0), jnp.float32(1.0)), jax.random.split(key_run, horizon)
        )
        return total

    keys = jax.random.split(jax.random.PRNGKey(rng_seed), episodes)
    return float(jnp.mean(jax.jit(jax.vmap(episode))(keys)))
