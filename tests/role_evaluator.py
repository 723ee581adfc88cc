"""A role-aware fake evaluator for in-process discovery tests (no sandbox, no training).

It scores every planned environment of its purpose (evaluation/settings.py `plan_runs`) from a
per-program quality and a per-seed noise, so properties of selection are exact and
deterministic (tests/test_validation_race.py, tests/test_protocols.py).
"""

from __future__ import annotations

import hashlib

from metarl.evaluation.outcome import EnvScore, Outcome
from metarl.evaluation.roles import score_roles
from metarl.evaluation.seeds import pinned_extension
from metarl.evaluation.settings import plan_runs
from metarl.tasks import get_task

SEEDS = {seed.source for seed in get_task("drift").seed_programs()}


def unit(*parts) -> float:
    """A deterministic number in [0, 1) from `parts`."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()
    return int(digest[:8], 16) / 0x100000000


class RoleEvaluator:
    """Scores each planned env of its settings. A program's return on an env is its quality
    for the env's role plus seed noise of amplitude `noise`; children beat the seeds on
    training envs by 1, and on validation envs by `validation_gain` (by `long_gain` when trained
    past `budget`, as a stability check trains them: a number, or env -> number for some envs;
    default the same); test returns come from
    `test_return(source, env, seed)`. Each batch is logged as (roles, programs, seeds), a run
    past `budget` with its roles labelled "ROLE@STEPS". `void`, a one-item list shared by the
    run's evaluators, counts the validation batches still to fail with an evaluator fault (as
    a baseline that times out): each such batch decrements it."""

    def __init__(
        self,
        settings,
        log,
        validation_gain=0.0,
        noise=0.1,
        test_return=None,
        behaviour=None,
        long_gain=None,
        budget=8192,
        void=None,
    ):
        self.settings, self.log = settings, log
        self.validation_gain, self.noise = validation_gain, noise
        self.long = int(settings.total_timesteps or 0) > budget
        # past the budget: children's validation gain, one for every env or env -> gain
        self.long_gain = long_gain if self.long else None
        self.test_return = test_return or (lambda source, env, seed: unit(source, env, seed))
        # what a program's returns on a role depend on, `behaviour(source, role)` (default:
        # its source); programs it maps to one value train identically there, as copies do
        self.behaviour = behaviour or (lambda source, role: source)
        self.void = void if void is not None else [0]

    def value(self, source: str, role: str, env: str, seed: int) -> float:
        child = source not in SEEDS
        if role == "test":
            return self.test_return(source, env, seed)
        base = unit(self.behaviour(source, role), role)
        if child:
            gain = self.validation_gain
            if self.long_gain is not None:
                gain = (
                    self.long_gain.get(env, gain)
                    if isinstance(self.long_gain, dict)
                    else self.long_gain
                )
            base += 1.0 if role == "train" else gain
        return 5.0 + base + self.noise * (unit(env, seed) - 0.5)

    def evaluate_batch(self, sources, task, known_fingerprints=None, progress=None, **kw):
        settings = self.settings
        seeds = kw.get("seeds") or pinned_extension(
            settings.seed_values, settings.seeds, kw.get("exclude_seeds", ())
        )
        runs = [p for p in plan_runs(settings) if p.stage == "full"]
        steps = int(settings.total_timesteps or 0)
        roles = tuple(f"{p.role}@{steps}" if self.long else p.role for p in runs)
        self.log.append((roles, len(sources), tuple(seeds)))
        if self.void[0] > 0 and any(role.startswith("validation") for role in roles):
            self.void[0] -= 1
            reason = "the baseline could not be trained: timed out"
            return [Outcome.evaluator_fault(reason, stage="full") for _ in sources]
        out = []
        for source in sources:
            scores = []
            for entry in runs:
                env = entry.config.env_name
                returns = [self.value(source, entry.role, env, s) for s in seeds]
                mean = sum(returns) / len(returns)
                scores.append(
                    EnvScore(
                        env=env,
                        seeds=list(seeds),
                        total_timesteps=steps or 8192,
                        returns=returns,
                        mean=mean,
                        std=0.0,
                        normalised=mean / 5.0,
                        baseline_mean=5.0,
                        random_mean=0.0,
                        role=entry.role,
                    )
                )
            outcome = Outcome(passed=True, stage="full", env_scores=scores, fingerprint=source)
            score_roles(outcome)
            out.append(outcome)
        return out

    def close(self):
        pass
