"""The same generation scored at full fidelity and with rungs (issue 38): environment steps,
wall time, and whether the same candidates reach the top.

    python benchmarks/fidelity.py                                  # the demo: classic, 1e5 steps
    python benchmarks/fidelity.py --seeds 4 --candidates 12
    python benchmarks/fidelity.py --suite minatar --timesteps 200000 --seeds 4

A generation is `--candidates` children of the drift task's seed programs written by the
offline mutation operator (the demo's proposer; rng seeds 0..N-1, parents alternating between
PPO-clip and LPO), evaluated twice through the real cascade with the same pinned training seeds:
once with `rungs=None` (`--fidelity full`) and once with the discovery default
(evaluation/fidelity.py `DISCOVERY_RUNGS`). The baselines are trained before either arm is
timed, so each arm's wall time is the candidates' own. Because the seeds are pinned and a rung
never changes a score (tests/test_fidelity.py), a candidate that passes its rungs has the same
fitness in both arms: the incumbents differ only when the full arm's best is stopped at a rung.

Environment steps are counted from each outcome's env scores: per environment, the furthest
segment the candidate trained.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from dataclasses import replace

from metarl.discovery.proposers.base import ParentInfo, ProposalRequest
from metarl.discovery.proposers.mutation import MutationProposer
from metarl.evaluation.cascade import Evaluator
from metarl.evaluation.fidelity import DISCOVERY_RUNGS
from metarl.evaluation.outcome import Outcome
from metarl.evaluation.settings import CascadeSettings
from metarl.tasks import get_task


def generation(count: int) -> list[str]:
    """`count` distinct children of the drift seed programs from the mutation operator."""
    task = get_task("drift")
    parents = [
        ParentInfo(id=name, code=task.seed_program(name).source, name=name)
        for name in ("ppo_clip", "lpo")
    ]
    proposer, sources, rng_seed = MutationProposer(), [], 0
    while len(sources) < count:
        request = ProposalRequest(task, [parents[rng_seed % 2]], rng_seed=rng_seed)
        proposal = proposer.propose(request)
        rng_seed += 1
        if proposal.code and proposal.code not in sources:
            sources.append(proposal.code)
    return sources


def env_steps(outcome: Outcome) -> int:
    """The environment steps a candidate trained: per env (and rate), its furthest segment."""
    furthest: dict[tuple, int] = {}
    for score in outcome.env_scores:
        key = (score.env, score.lr)
        furthest[key] = max(furthest.get(key, 0), int(score.total_timesteps))
    return sum(furthest.values())


def score(settings: CascadeSettings, sources: list[str]) -> tuple[list[Outcome], float]:
    """Every source's outcome and the generation's wall time (its baselines trained first)."""
    with Evaluator(settings, workers=1) as evaluator:
        evaluator.references("drift", settings.seed_values)
        start = time.perf_counter()
        outcomes = evaluator.evaluate_batch(sources, "drift", seeds=settings.seed_values)
        return outcomes, time.perf_counter() - start


def ranking(outcomes: list[Outcome]) -> list[int]:
    """Indices of the passed candidates, best fitness first."""
    passed = [i for i, o in enumerate(outcomes) if o.passed and o.fitness is not None]
    return sorted(passed, key=lambda i: -outcomes[i].fitness)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="classic")
    parser.add_argument("--timesteps", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--top", type=int, default=3)
    args = parser.parse_args()
    full = CascadeSettings(
        suite=args.suite,
        seeds=args.seeds,
        seed_values=list(range(args.seeds)),
        total_timesteps=args.timesteps,
        heldout=False,
        probe_seed=0,
    )
    rungs = replace(full, rungs=list(DISCOVERY_RUNGS))
    sources = generation(args.candidates)
    print(
        f"machine: {platform.node()} ({os.cpu_count()} cores); suite {args.suite}, "
        f"{args.timesteps} steps, {args.seeds} seeds, {len(sources)} candidates, "
        f"rungs {[round(r, 3) for r in DISCOVERY_RUNGS]}"
    )
    arms = {"full": score(full, sources), "rungs": score(rungs, sources)}
    print("| fidelity | env steps per seed | wall s | passed | stopped early | at a rung | top |")
    print("|---|---|---|---|---|---|---|")
    for name, (outcomes, wall) in arms.items():
        steps = sum(env_steps(o) for o in outcomes)
        short = [o for o in outcomes if not o.passed and o.stage == "short"]
        at_rung = [o for o in short if (o.reason or "").startswith("rung ")]
        top = ranking(outcomes)[: args.top]
        print(
            f"| {name} | {steps} | {wall:.1f} | {sum(o.passed for o in outcomes)} | "
            f"{len(short)} | {len(at_rung)} | {top} |"
        )
    (full_out, full_wall), (rung_out, rung_wall) = arms["full"], arms["rungs"]
    full_steps = sum(env_steps(o) for o in full_out)
    rung_steps = sum(env_steps(o) for o in rung_out)
    best_full, best_rungs = ranking(full_out)[:1], ranking(rung_out)[:1]
    kept = set(ranking(full_out)[: args.top]) & set(ranking(rung_out)[: args.top])
    same = [
        i
        for i in range(len(sources))
        if full_out[i].passed and rung_out[i].passed and full_out[i].fitness != rung_out[i].fitness
    ]
    print(
        f"\nenv steps {full_steps / max(rung_steps, 1):.2f}x fewer with rungs, wall "
        f"{full_wall / max(rung_wall, 1e-9):.2f}x; incumbent full {best_full} vs rungs "
        f"{best_rungs} ({'same' if best_full == best_rungs else 'DIFFERENT'}); top {args.top} "
        f"shared: {len(kept)}; survivors whose fitness differs between arms: {len(same)}"
    )
    for i, outcome in enumerate(rung_out):
        if (outcome.reason or "").startswith("rung "):
            fitness = full_out[i].fitness
            print(f"  candidate {i} stopped: full-fidelity fitness {fitness}; {outcome.reason}")


if __name__ == "__main__":
    main()
