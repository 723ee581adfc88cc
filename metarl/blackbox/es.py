"""Black-box meta-learning with evolution strategies (evosax's OpenAI-ES).

The ES searches the weights of a meta-network (blackbox/families.py): the LPO drift network
(rl/lpo.py) for the `drift` task, OPEN-lite (blackbox/open_lite.py) for `optimizer`. Each
generation:

    population = ES.ask()                                  antithetic pairs around the mean
    for each training env (one compiled program per env, for the whole run):
        returns[member, seed] = train(key[seed], population[member])   vmap x vmap, same keys
    fitness[member] = mean over envs of (R - R_random) / (R_baseline - R_random)
    ES.tell(-fitness)                                      evosax minimises; centered ranks

and every `export_every` generations the mean becomes an ordinary candidate (blackbox/export.py)
scored by the sandboxed cascade on the same seeds as every other method's candidates, archived
with `method = es`, its generation, and the previous export as its parent. The ES fitness is
metadata only: a member vmapped in a population does not train bit for bit like the same
network alone (float rounding, amplified by RL), so only the cascade's scores rank anything.

The ES trains metarl's own network code (no candidate Python), so it runs in this process and
keeps its compiled programs for the whole run. Its state (mean, sigma, Adam state, RNG,
generation) is written to the run's row after every generation, so a killed run resumes from
the last finished generation with the same state, bit for bit.
"""

from __future__ import annotations

import base64
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from evosax.algorithms import Open_ES

from metarl.archives.reuse import evaluate_or_reuse
from metarl.archives.rows import candidate_row
from metarl.archives.runs import INTERRUPTED, RunSession, RunSpec, open_run
from metarl.archives.store import Archive
from metarl.blackbox.config import ESConfig
from metarl.blackbox.export import ExportError
from metarl.blackbox.families import FAMILIES
from metarl.errors import MetarlError
from metarl.evaluation.cascade import Evaluator
from metarl.evaluation.outcome import Outcome
from metarl.evaluation.settings import Reference, plan_runs
from metarl.platform import device_description, evaluation_identity
from metarl.rl.lpo import MetaParams, network_width
from metarl.rl.suites import get_suite
from metarl.tasks import get_task

logger = logging.getLogger(__name__)

Event = Callable[[str, dict], None]
# A member whose training went non-finite ranks below every finite member.
FAILED_FITNESS = -1e6


class ESError(MetarlError):
    """A run that cannot start or go on (one line for the user)."""


class Normaliser(NamedTuple):
    """An env's returns mapped to normalised scores: 0 = random policy, 1 = the baseline."""

    baseline: float
    random: float

    def __call__(self, returns: jax.Array) -> jax.Array:
        return (returns - self.random) / (self.baseline - self.random)


class Generation(NamedTuple):
    """What one generation measured (the ES's own objective: metadata, never a rank)."""

    generation: int  # 1-based: the number of ES updates done after this one
    fitness: np.ndarray  # [population] mean normalised return over envs and member seeds
    sigma: float  # the ES's sigma used to sample this generation
    seconds: float


def make_strategy(config: ESConfig, solution: Any = None) -> Open_ES:
    """evosax's OpenAI-ES with the paper's settings (see blackbox/config.py).

    Args:
        config: the run's options (resolved).
        solution: a pytree shaped like the searched parameters; default the task family's
            zero parameters.
    """
    config = config.resolved()  # the task's schedule where the options leave it open
    learning_rate = optax.exponential_decay(
        config.lr, transition_steps=1, decay_rate=config.lr_decay, end_value=config.lr_floor
    )
    sigma = optax.exponential_decay(
        config.sigma,
        transition_steps=1,
        decay_rate=config.sigma_decay,
        end_value=config.sigma_floor,
    )
    return Open_ES(
        population_size=config.population,
        solution=solution
        if solution is not None
        else FAMILIES[config.task].zero_params(config.hidden),
        use_antithetic_sampling=True,
        optimizer=optax.adam(learning_rate, b1=config.beta1),
        std_schedule=sigma,
    )


def make_population_fitness(
    config: ESConfig, normalisers: dict[str, Normaliser]
) -> Callable[[jax.Array, MetaParams], tuple[jax.Array, dict[str, jax.Array]]]:
    """`fitness(keys, population) -> (fitness [pop], env -> final returns [pop, seeds])`.

    One jitted program per training env, vmapped over members (outer) and seeds (inner); every
    member trains on the same keys (common random numbers). Compiled on the first call and
    reused for the whole run.
    """
    suite = get_suite(config.suite)
    family = FAMILIES[config.task]
    programs = {}
    for env in suite.envs:
        train = family.make_train(suite.config(env, config.timesteps))
        programs[env] = jax.jit(jax.vmap(jax.vmap(train, in_axes=(0, None)), in_axes=(None, 0)))

    def fitness(keys: jax.Array, population: MetaParams):
        returns = {env: program(keys, population).final_return for env, program in programs.items()}
        scores = [normalisers[env](r.mean(axis=1)) for env, r in returns.items()]
        total = jnp.mean(jnp.stack(scores), axis=0)
        return jnp.where(jnp.isfinite(total), total, FAILED_FITNESS), returns

    return fitness


def normalisers_from(references: dict[str, Reference], settings) -> dict[str, Normaliser]:
    """Each training env's (baseline, random) mean return from the cascade's references (the
    baseline program at the same budget, on the cascade's seeds)."""
    out = {}
    for entry in plan_runs(settings):
        if entry.stage == "full" and not entry.heldout:
            ref = references[entry.key]
            out[entry.config.env_name] = Normaliser(ref.baseline_mean, ref.random_mean)
    return out


def es_generation(
    strategy: Open_ES,
    fitness_of: Callable,
    es_state: Any,
    rng: jax.Array,
    member_seeds: int,
    params: Any,
) -> tuple[Any, jax.Array, np.ndarray]:
    """One ES generation: ask, train every member on the same fresh keys, tell.

    Args:
        strategy: the ES (`make_strategy`).
        fitness_of: `make_population_fitness(...)`.
        es_state: the ES state before the generation.
        rng: the search's key; split here, the rest returned.
        member_seeds: training runs per member (common random numbers: the same keys for all).
        params: the strategy's params.

    Returns:
        (ES state after the update, the remaining key, the members' fitness).
    """
    rng, key_ask, key_train, key_tell = jax.random.split(rng, 4)
    population, es_state = strategy.ask(key_ask, es_state, params)
    fitness, _ = fitness_of(jax.random.split(key_train, member_seeds), population)
    es_state, _ = strategy.tell(key_tell, population, -fitness, es_state, params)  # minimises
    return es_state, rng, np.asarray(fitness)


# -- the resumable state ------------------------------------------------------------------------


def encode_tree(tree: Any) -> list[dict]:
    """The leaves of a pytree, each exactly (dtype, shape, raw bytes in base64)."""
    return [
        {
            "dtype": str(np.asarray(leaf).dtype),
            "shape": list(np.shape(leaf)),
            "data": base64.b64encode(np.ascontiguousarray(leaf).tobytes()).decode(),
        }
        for leaf in jax.tree.leaves(tree)
    ]


def decode_tree(template: Any, leaves: list[dict]) -> Any:
    """The pytree shaped like `template` whose leaves `encode_tree` wrote.

    Raises:
        ESError: the stored leaves do not fit the template (another ES configuration).
    """
    flat, treedef = jax.tree.flatten(template)
    if len(flat) != len(leaves):
        raise ESError("the stored ES state does not match this configuration")
    out = []
    for like, leaf in zip(flat, leaves):
        array = np.frombuffer(base64.b64decode(leaf["data"]), dtype=leaf["dtype"])
        array = array.reshape(leaf["shape"])
        if array.shape != np.shape(like):
            raise ESError("the stored ES state does not match this configuration")
        out.append(jnp.asarray(array))
    return jax.tree.unflatten(treedef, out)


@dataclass
class ESRunState:
    """Everything a resume needs, beside the config: written after every generation."""

    generation: int = 0
    es: list | None = None  # encode_tree(evosax state)
    rng: list | None = None  # encode_tree(jax key)
    last_export: str | None = None  # the previous export's candidate id (its parent)
    exported_generation: int | None = None  # the generation whose mean was exported last
    exports: int = 0
    elapsed_s: float = 0.0
    best_fitness: float | None = None  # best member fitness seen (metadata)
    # per generation: {generation, best, mean, std, sigma, seconds} of the members' ES fitness
    # (what `metarl report` plots; metadata, never a rank); an LPG run adds its curriculum's
    # draw and level buffer (blackbox/lpg_es.py)
    history: list = field(default_factory=list)
    # an LPG run's curriculum (rl/environments/curriculum.py `Curriculum.to_dict`) and
    # reference cache
    curriculum: dict | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict | None) -> "ESRunState":
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in (data or {}).items() if k in known})


@dataclass
class ESResult:
    run_id: str
    status: str  # finished | stopped | interrupted
    reason: str
    generation: int
    exports: int
    best_id: str | None
    best_fitness: float | None


# -- the run --------------------------------------------------------------------------------


class ESRun:
    """One ES run against an archive: `run()` goes until the generations or the time budget are
    spent (or Ctrl-C), exporting the mean every `export_every` generations and at the end."""

    def __init__(
        self,
        config: ESConfig,
        archive: Archive,
        *,
        resume: str | None = None,
        on_event: Event | None = None,
        evaluator_factory: Callable[..., Any] | None = None,
        initial_mean: MetaParams | None = None,
    ):
        """Args:
        config: the run's options.
        archive: where the run, its state and its exports are written.
        resume: continue this ES run (its stored state; `initial_mean` is then ignored).
        on_event: `(kind, data)` for "status", "generation" and "export" events.
        evaluator_factory: `factory(settings) -> Evaluator` scoring the exports.
        initial_mean: the ES mean to start from (a warm start); default all zeros (PPO-clip).
        """
        self.config = config.resolved()
        self.initial_mean = initial_mean
        self.archive = archive
        self.resume_id = resume
        self.emit = on_event or (lambda kind, data: None)
        self.factory = evaluator_factory or (lambda settings: Evaluator(settings, workers=1))
        self.task = self._task()
        self.family = FAMILIES.get(self.config.task)
        self.settings = self.config.cascade_settings()
        self.versions = evaluation_identity()  # what its evaluation keys are built on
        self.device = device_description()
        self.strategy = make_strategy(self.config, self.zero_mean())
        self.run_id: str | None = None
        self.state = ESRunState()
        self._start_from: tuple[Any, jax.Array] | None = None  # set by `_open`
        self._session_start = time.monotonic()
        self._elapsed_base = 0.0

    # -- what a family of meta-networks changes (blackbox/lpg_es.py overrides these) -------------
    def _task(self):
        return get_task(self.config.task)

    def zero_mean(self) -> Any:
        """The ES mean a fresh run starts from when no initial mean is given."""
        return self.family.zero_params(self.config.hidden)

    def check_mean(self, mean: Any) -> None:
        """Raises ESError when `mean` does not fit this run's network."""
        if network_width(mean) != self.config.hidden:
            raise ESError(
                f"the initial mean has width {network_width(mean)}, not {self.config.hidden}"
            )

    def network_name(self) -> str:
        return self.family.network

    def mean_source(self, mean: Any, title: str) -> str:
        """The ES mean as candidate source (raises ExportError when it cannot be written)."""
        return self.family.source(mean, title)

    def make_fitness(self, evaluator) -> Callable:
        """`fitness(keys, population) -> (fitness [pop], details)` for `es_generation`."""
        self.emit("status", {"text": "training the baselines (cached after the first run)"})
        try:
            references = evaluator.references(self.task)
        except RuntimeError as error:
            raise ESError(f"the baselines could not be trained: {error}") from error
        return make_population_fitness(self.config, normalisers_from(references, self.settings))

    def score_export(self, evaluator, code: str, eval_key: str) -> tuple[Outcome, str | None]:
        """(outcome, id of the archived candidate it was reused from, or None) of an export."""
        (scored,) = evaluate_or_reuse(
            self.archive,
            lambda sources: evaluator.evaluate_batch(sources, self.task),
            [code],
            eval_key,
        )
        return scored

    # -- bookkeeping ----------------------------------------------------------------------------
    def elapsed(self) -> float:
        return self._elapsed_base + time.monotonic() - self._session_start

    def _open(self) -> RunSession:
        """Create the run, or take over the stored one (its ES state and RNG decoded first);
        what the search continues from is left in `_start_from`.

        Raises:
            ESError: a mismatched initial mean, resume options or stored state.
            ArchiveError: no such run, or not an ES run.
            LiveRun: the run is still running.
        """
        fresh_rng = jax.random.PRNGKey(self.config.rng_seed)
        rng, init_key = jax.random.split(fresh_rng)
        mean = self.initial_mean
        if mean is None:
            mean = self.zero_mean()
        else:
            self.check_mean(mean)
        es_state = self.strategy.init(init_key, mean, self.strategy.default_params)
        self._start_from = (es_state, rng)

        def check(run: dict) -> None:
            if run.get("config_hash") != self.config.hash():
                raise ESError(f"run {run['id']} was started with other ES options")
            state = ESRunState.from_dict(run.get("state"))
            if state.es is not None:  # else killed before its first generation finished
                self._start_from = (decode_tree(es_state, state.es), decode_tree(rng, state.rng))
            self.state = state
            self._elapsed_base = state.elapsed_s

        spec = RunSpec(
            method="es",
            task=self.config.task,
            suite=self.config.suite,
            config=self.config.to_dict(),
            config_hash=self.config.hash(),
            versions=self.versions,
            device=self.device,
            proposer="evosax Open_ES",
            mode="es",
            rng_seed=self.config.rng_seed,
            state=ESRunState().to_dict(),
            changeable={"max_time_s": self.config.max_time},
        )
        session = open_run(self.archive, spec, resume=self.resume_id, check=check)
        session.final = lambda: {"elapsed_s": self.elapsed()}
        self.run_id = session.run_id
        return session

    def _save(self, es_state: Any, rng: jax.Array, **run_fields) -> None:
        self.state.es = encode_tree(es_state)
        self.state.rng = encode_tree(rng)
        self.state.elapsed_s = self.elapsed()
        self.archive.update_run(
            self.run_id,
            state=self.state.to_dict(),
            generation=self.state.generation,
            elapsed_s=self.state.elapsed_s,
            **run_fields,
        )

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> ESResult:
        """Run (or resume) the ES; returns how this session ended.

        Raises:
            ESError: the run cannot start (mismatched resume, no baselines).
            ArchiveError: no such run to resume, or not an ES run.
            LiveRun: the run to resume is still running.
        """
        with self._open() as session:  # heartbeat and log; an escaping error ends it as failed
            status, reason = self._search(*self._start_from)
            session.finish(status, reason)
        return self.result(status, reason)

    def _search(self, es_state: Any, rng: jax.Array) -> tuple[str, str]:
        """The generations and exports from `es_state`; (status, reason) of how they ended."""
        status, reason = "finished", "generations done"
        evaluator = self.factory(self.settings)
        try:
            fitness_of = self.make_fitness(evaluator)
            params = self.strategy.default_params
            if self._export_due():  # killed between a generation and its export
                self.export(evaluator, es_state)
                self._save(es_state, rng)
            while self.state.generation < self.config.generations:
                # as in discovery: a wall-time cap applies once one generation is done
                capped = self.config.max_time is not None and self.state.generation >= 1
                if capped and self.elapsed() >= self.config.max_time:
                    status, reason = "stopped", f"time budget of {self.config.max_time:g} s spent"
                    break
                es_state, rng, generation = self.step(fitness_of, es_state, rng, params)
                self._save(es_state, rng)
                self.emit("generation", generation._asdict() | {"run_id": self.run_id})
                if self._export_due():
                    self.export(evaluator, es_state)
                    self._save(es_state, rng)
            if self._export_due(final=True):  # the final mean is always scored
                self.export(evaluator, es_state)
                self._save(es_state, rng)
        except KeyboardInterrupt:
            status, reason = "interrupted", INTERRUPTED
        finally:
            evaluator.close()
        return status, reason

    def _export_due(self, final: bool = False) -> bool:
        """Whether the mean of the current generation still has to be exported."""
        generation = self.state.generation
        due = final or generation % self.config.export_every == 0
        return generation > 0 and due and self.state.exported_generation != generation

    def step(self, fitness_of, es_state, rng, params) -> tuple[Any, jax.Array, Generation]:
        """One generation (see `es_generation`), counted and logged."""
        start = time.perf_counter()
        sigma = float(es_state.std)
        es_state, rng, fitness = es_generation(
            self.strategy, fitness_of, es_state, rng, self.config.member_seeds, params
        )
        self.state.generation += 1
        best = float(fitness.max())
        if self.state.best_fitness is None or best > self.state.best_fitness:
            self.state.best_fitness = best
        elapsed = time.perf_counter() - start
        self.state.history.append(
            {
                "generation": self.state.generation,
                "best": best,
                "mean": float(fitness.mean()),
                "std": float(fitness.std()),
                "sigma": sigma,
                "seconds": elapsed,
            }
        )
        logger.info(
            "generation %d: best %.3f mean %.3f sigma %.4f (%.1f s)",
            self.state.generation,
            best,
            float(fitness.mean()),
            sigma,
            elapsed,
        )
        return es_state, rng, Generation(self.state.generation, fitness, sigma, elapsed)

    def mean_params(self, es_state) -> MetaParams:
        """The ES mean as LPONetwork parameters."""
        return self.strategy.get_mean(es_state)

    def export(self, evaluator, es_state) -> str:
        """Score the ES mean through the cascade and archive it; its candidate id."""
        generation = self.state.generation
        seq = self.state.exports + 1
        cid = f"{self.run_id}-{seq}"
        title = f"{self.network_name()}: ES mean after generation {generation} of {self.run_id}"
        try:
            code = self.mean_source(self.mean_params(es_state), title)
        except ExportError as error:
            outcome, code = Outcome.failure("static", str(error)), None
        row = candidate_row(
            run_id=self.run_id,
            seq=seq,
            task=self.config.task,
            method="es",
            code=code,
            settings=self.settings,
            total_timesteps=self.config.timesteps,
            versions=self.versions,
            device=self.device,
            name=f"es-g{generation}",
            thought=title,
            parent_ids=[self.state.last_export] if self.state.last_export else [],
            generation=generation,
            proposer="evosax Open_ES",
            operator="es-mean",
            meta={
                "es_generation": generation,
                "es_best_fitness": self.state.best_fitness,
                "sigma": float(es_state.std),
                "hidden": self.config.hidden,
                "population": self.config.population,
            },
        )
        if code is not None:
            self.emit("status", {"text": f"scoring the ES mean of generation {generation}"})
            outcome, row["cached_from"] = self.score_export(evaluator, code, row["eval_key"])
        best = self._best_after(cid, outcome)
        self.state.exports = seq
        self.state.last_export = cid
        self.state.exported_generation = generation
        self.archive.record_candidate(
            row,
            outcome,
            run_update={
                "candidates_count": True,
                "state": self.state.to_dict(),
                **({"best_id": best[0], "best_fitness": best[1]} if best else {}),
            },
        )
        self.emit(
            "export",
            {
                "id": cid,
                "generation": generation,
                "status": "passed" if outcome.passed else "failed",
                "fitness": outcome.fitness,
                "reason": outcome.reason,
            },
        )
        return cid

    def _best_after(self, cid: str, outcome: Outcome) -> tuple[str, float] | None:
        """(id, fitness) of the run's best export once export `cid` is recorded, if it changed."""
        if not outcome.passed or outcome.fitness is None:
            return None
        run = self.archive.get_run(self.run_id)
        if run.get("best_fitness") is not None and run["best_fitness"] >= outcome.fitness:
            return None
        return cid, outcome.fitness

    def result(self, status: str, reason: str) -> ESResult:
        run = self.archive.get_run(self.run_id)
        return ESResult(
            self.run_id,
            status,
            reason,
            self.state.generation,
            self.state.exports,
            run.get("best_id"),
            run.get("best_fitness"),
        )
