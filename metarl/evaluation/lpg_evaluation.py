"""Scoring a Learned Policy Gradient network: agents trained by it, on every role of a suite.

An LPG candidate is data (rl/lpg/network.py `lpg_source`: sizes and base64 weights), read with `ast`
and never executed. It is still untrusted: a small text can declare a network that takes
minutes or gigabytes to train (a width bomb), or an npz whose members inflate to gigabytes (a
zip bomb). So it gets what a code candidate gets (README, Safety):

- **bounded before it is read**: in the parent, `read_lpg_source` caps the text, every width,
  the parameter count and every member's decompressed size before anything of that size is
  allocated, and refuses a wrong member set, dtype or shape with one "not an LPG network: ..."
  line (stage "static");
- **trained under the worker's limits**: the agents are trained in a sandboxed trainer worker
  (evaluation/sandbox.py: bubblewrap, RLIMIT_AS and the resident-memory watchdog at
  `--memory-mb`, SIGKILL at `--timeout`, CPU time), which runs only metarl's code on the
  data; a network that runs out of either is failed with that reason, blamed on itself, and
  the next candidate of the batch gets a worker of its own.

What stays the same as for every other candidate is the score's meaning
(evaluation/outcome.py): per environment, the agents' final returns on training seeds drawn
fresh and recorded (`SeedSource`), normalised so that 0 is the uniform policy and 1 is the
reference, the actor-critic of rl/lpg/agent.py with the same agent, budget and seeds (GROOVE's
comparison); per role, the IQM/mean aggregate with a bootstrap interval (`score_roles`). The
test role (the tabular LPG levels, Catch, CartPole) is reported, never read by the ES.

Lifetimes: a drawn grid level is trained for the lifetime its seed fixes (TA-LPG's task); a
named level or a gymnax environment for `updates` (default: the longest lifetime of the suite's
distribution, 250 updates; GROOVE evaluates its tabular levels at 2,500 updates of 64 envs, a
GPU's budget: `--eval-updates 2500`); on a suite without a distribution (classic, minatar:
`metarl evaluate --task lpg --suite classic`) for the suite's per-env budget in updates. The
parent plans them (`LPGEvaluator.plan`), so the worker needs only environment names.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from metarl.evaluation.outcome import EnvScore, Outcome
from metarl.evaluation.roles import score_roles
from metarl.evaluation.sandbox import WorkerResult, run_job
from metarl.evaluation.seeds import SeedSource
from metarl.evaluation.settings import SandboxLimits
from metarl.rl.environments.names import split_variant
from metarl.rl.lpg.agent import AgentConfig, lifetime_from_seed
from metarl.rl.lpg.network import LPGFormatError, read_lpg_source
from metarl.rl.scoring import normalised_score
from metarl.rl.suites import Suite
from metarl.tasks.lpg import TASK as LPG

logger = logging.getLogger(__name__)
JOB_KIND = "train-lpg"  # the sandbox worker's job that trains agents with an LPG network


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


@dataclass(frozen=True)
class PlannedLPGRun:
    """One environment an LPG candidate is scored on: its role and the agents' lifetime."""

    role: str
    env: str
    lifetime: int


class LPGEvaluator:
    """Scores LPG candidates on a suite's roles (the interface ES exports use: `evaluate_batch`,
    `close`), each in a sandboxed trainer worker of its own.

    Args:
        suite: the suite whose train/validation/test environments are scored.
        seeds: where each evaluation's training seeds come from (drawn fresh, or pinned).
        updates: lifetime on named levels and gymnax environments (None: see `env_lifetime`).
        num_envs: parallel environments per agent.
        roles: the roles to score (test may be left out).
        limits: the worker's limits (`--timeout`, `--memory-mb`, the sandbox).
    """

    def __init__(
        self,
        suite: Suite,
        seeds: SeedSource,
        updates: int | None = None,
        num_envs: int = 16,
        roles: Sequence[str] = ("train", "validation", "test"),
        limits: SandboxLimits | None = None,
    ):
        self.suite = suite
        self.seeds = seeds
        self.updates = updates
        self.num_envs = num_envs
        self.roles = tuple(roles)
        self.limits = limits or SandboxLimits()
        self.jobs = 0  # sandboxed trainings started (a refused text starts none)

    def close(self) -> None:
        """Nothing is held between evaluations (each runs in a worker of its own)."""

    def __enter__(self) -> "LPGEvaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def plan(self) -> list[PlannedLPGRun]:
        """Every (role, environment, lifetime) one evaluation trains agents on."""
        roles = self.suite.roles()
        per_update = self.num_envs * AgentConfig().rollout_len
        return [
            PlannedLPGRun(role, env, env_lifetime(self.suite, env, self.updates, per_update))
            for role in self.roles
            for env in roles[role]
        ]

    def evaluate_batch(
        self,
        sources: Sequence[str],
        task: str = LPG.name,
        progress: Callable[[int, str], None] | None = None,
        **_,
    ) -> list[Outcome]:
        """Each source's outcome (see `evaluate`), one worker each: a candidate that exhausts
        its limits fails alone. The cascade's other options (fingerprints) do not apply."""
        outcomes = []
        for index, source in enumerate(sources):
            report = (lambda stage, i=index: progress(i, stage)) if progress else None
            outcomes.append(self.evaluate(source, report))
        return outcomes

    def evaluate(self, source: str, progress: Callable[[str], None] | None = None) -> Outcome:
        """Train agents with the LPG network `source` on every role's environments.

        Returns:
            The outcome: failed at "static" for a text that is not an LPG network (nothing is
            trained); at "full" when an agent's training went non-finite or the worker ran out
            of time or memory (the candidate's fault), or as an evaluator fault when the worker
            could not start; else passed, with one EnvScore per env.
        """
        started = time.perf_counter()
        if progress:
            progress("static")
        try:
            read_lpg_source(source)  # bounded: refused here costs no worker
        except LPGFormatError as error:
            return Outcome.failure("static", f"not an LPG network: {error}")
        seeds = self.seeds.draw()
        plan = self.plan()
        job = {
            "kind": JOB_KIND,
            "task": LPG.name,
            "source": source,
            "seeds": seeds.as_list(),
            "num_envs": self.num_envs,
            "runs": [[run.role, run.env, run.lifetime] for run in plan],
            "first_stage": "full",
        }
        if progress:
            progress("full")
        self.jobs += 1
        result = run_job(job, self.limits)
        outcome = _outcome(result, plan, seeds)
        outcome.timings["total"] = time.perf_counter() - started
        return outcome


def _outcome(result: WorkerResult, plan: list[PlannedLPGRun], seeds) -> Outcome:
    """The evaluation's outcome from the worker's result (see `LPGEvaluator.evaluate`)."""
    sandbox = {"status": result.status, "stage": "full"}
    if result.status == "startup":
        return Outcome.evaluator_fault(result.reason or "the worker did not start", "full")
    if result.status != "ok":  # timeout, memory, CPU time, death: the network's training
        reason = result.reason or f"the trainer stopped ({result.status})"
        message = f"training agents with this LPG network {reason}"
        return Outcome.failure("full", message, sandbox=sandbox)
    payload = result.result.get("payload") or {}
    if result.result.get("kind") != JOB_KIND:
        detail = str(payload.get("error", "no result"))[:500]
        return Outcome.evaluator_fault(f"the LPG trainer failed: {detail}", "full")
    if payload.get("refused"):  # the worker's own read of the text (the same checks)
        return Outcome.failure("static", f"not an LPG network: {payload['refused']}")
    scores = []
    for run, data in zip(plan, payload.get("runs", [])):
        returns = np.asarray(data["returns"], np.float64)
        if returns.shape != (len(seeds),) or not np.all(np.isfinite(returns)):
            return Outcome.failure(
                "full", f"an agent trained by this LPG went non-finite on {run.env}"
            )
        reference, rand = float(np.mean(data["reference"])), float(data["random"])
        scores.append(
            EnvScore(
                env=run.env,
                seeds=seeds.as_list(),
                total_timesteps=int(data["steps"]),
                returns=returns.tolist(),
                mean=float(returns.mean()),
                std=float(returns.std()),
                normalised=_finite(normalised_score(float(returns.mean()), rand, reference)),
                baseline_mean=reference,
                random_mean=rand,
                run_s=float(data["run_s"]),
                steps_per_s=int(data["steps"]) * len(seeds) / max(float(data["run_s"]), 1e-9),
                role=run.role,
            )
        )
        logger.info("LPG on %s (%s): %.3f", run.env, run.role, scores[-1].mean)
    if len(scores) != len(plan):
        return Outcome.evaluator_fault("the LPG trainer returned too few runs", "full")
    outcome = Outcome(passed=True, stage="full", env_scores=scores, seeds_pinned=seeds.pinned)
    outcome.sandbox = sandbox
    score_roles(outcome)
    return outcome


def scan_length(lifetime: int, longest: int) -> int:
    """The scan length an agent with `lifetime` updates is compiled for: the next power of two,
    at most the job's `longest` lifetime.

    A level's params and lifetime are inputs of the agent's program (rl/lpg/agent.py: the loop
    runs the scan's length and freezes the agent after its lifetime, the same numbers bit for
    bit), so levels whose lifetimes round to the same length share one compile: GROOVE's
    log-uniform 10-250 lifetimes need at most five programs instead of one per level (a
    compile is ~10-25 s on the 2-core CPU), for at most twice the updates of a short-lived
    agent (the cheap ones)."""
    return min(1 << max(int(lifetime) - 1, 0).bit_length(), max(int(longest), int(lifetime)))


def train_lpg_job(job: dict, report: Callable[..., None]) -> dict:
    """The worker's side (job kind "train-lpg", a trainer: metarl's code on the candidate's data):
    read the network again, train agents with it, the actor-critic reference and a uniform
    policy on the planned environments and seeds.

    Returns:
        {"runs": [{"returns", "reference", "random", "steps", "run_s"} per planned run]}, or
        {"refused": reason} for a text the worker's own read refuses.
    """
    # lazy: the worker imports the training stack only for the jobs that train
    import jax

    # lazy: as above
    from metarl.rl.environments.registry import make_env
    from metarl.rl.lpg.agent import (
        agent_config_for,
        make_a2c_train,
        make_lpg_train,
        make_random_return,
    )

    try:
        shape, params = read_lpg_source(job["source"])
    except LPGFormatError as error:
        return {"refused": str(error)}
    keys = jax.vmap(jax.random.PRNGKey)(np.asarray(job["seeds"]))
    num_envs = int(job["num_envs"])
    longest = max((int(lifetime) for _, _, lifetime in job["runs"]), default=1)
    envs = {name: make_env(name) for _, name, _ in job["runs"]}
    # the final evaluation runs to the family's longest time limit: an episode counts up to its
    # first end, so a longer evaluation of a level scores the same (and shares the program)
    eval_steps: dict[str, int] = {}
    for name, env in envs.items():
        family = env.family or name
        eval_steps[family] = max(eval_steps.get(family, 0), env.max_steps)
    programs: dict[tuple, tuple] = {}  # one compiled set per family, agent and scan length
    runs = []
    for role, env_name, lifetime in job["runs"]:
        report("status", text=f"LPG agents on {env_name} ({role})")
        env = envs[env_name]
        family = env.family or env_name
        scan = scan_length(int(lifetime), longest)
        config = agent_config_for(env_name, scan, num_envs, eval_steps[family] or None)
        key = (family, config)
        if key not in programs:  # jit's cache is per function: build each program once
            programs[key] = (
                jax.jit(jax.vmap(make_lpg_train(config, shape, env.env), (0, None, None, None))),
                jax.jit(jax.vmap(make_a2c_train(config, env.env), (0, None, None))),
                jax.jit(jax.vmap(make_random_return(config, env.env), (0, None))),
            )
        train, reference, rand = programs[key]
        start = time.perf_counter()
        returns = np.asarray(train(keys, params, env.params, int(lifetime)).final_return)
        run_s = time.perf_counter() - start
        ref = np.asarray(reference(keys, env.params, int(lifetime)).final_return)
        runs.append(
            {
                "returns": [float(x) for x in returns],
                "reference": [float(x) for x in ref],
                "random": float(np.mean(np.asarray(rand(keys, env.params)))),
                "steps": int(lifetime) * config.num_envs * config.rollout_len,
                "run_s": run_s,
            }
        )
    return {"runs": runs}


def lpg_evaluator(suite: Suite, settings) -> "LPGEvaluator":
    """The LPG evaluator `metarl evaluate --task lpg` uses: the cascade settings' seeds, roles
    and limits (`--timeout`, `--memory-mb` mean what they mean for code); lifetimes from a grid
    suite's distribution, or from the budget (`--timesteps`, else the suite's) on the others:
    LPG's generalisation claim is that a network meta-trained on grid levels trains agents on
    classic control and MinAtar (`--suite classic`, `minatar`)."""
    roles = ["train"]
    if settings.validation and suite.validation:
        roles.append("validation")
    if settings.heldout and suite.heldout:
        roles.append("test")
    seeds = SeedSource(settings.seeds, pinned=settings.seed_values)
    per_update = 16 * AgentConfig().rollout_len
    budget = settings.total_timesteps
    updates = max(1, budget // per_update) if budget and suite.distribution is None else None
    return LPGEvaluator(suite, seeds, updates=updates, roles=roles, limits=settings.limits())
