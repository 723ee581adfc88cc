"""A curriculum generation's compile cost with each drawn level a constant of its own program
against the level as an input of one program (issue 38): the baseline's and a batch of
candidates' training on `--levels` levels drawn from grid-small.

    python benchmarks/level_programs.py                   # 3 levels, 2 candidates
    python benchmarks/level_programs.py --levels 6
    python benchmarks/level_programs.py --lpg --levels 6   # the LPG evaluator's trainer job

In-process (no sandbox: the stages the trainer runs), so the numbers are the training and the
compiles themselves. Run it on two checkouts to compare designs (PYTHONPATH=<checkout>): the
table names the code it ran (`program_key` exists only where levels are inputs). Compile
seconds are the BatchPrograms' own (`compile_s` of each segment's first run); the pre-flight
and call-site tracing are in the candidates' wall time.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from metarl.evaluation import stages
from metarl.evaluation.settings import CascadeSettings, plan_runs
from metarl.platform import backend
from metarl.rl.environments.distributions import DISTRIBUTIONS
from metarl.tasks import get_task


def lpg(levels: list[str]) -> None:
    """The LPG evaluator's trainer job (evaluation/lpg_evaluation.py) on `levels`, each with
    its seed's lifetime: one job for all (programs shared by family and scan length) against
    one job per level (one program per level: the design before, the same numbers)."""
    import jax

    from metarl.evaluation.lpg_evaluation import train_lpg_job
    from metarl.rl.lpg.agent import lifetime_from_seed
    from metarl.rl.lpg.network import LPGShape, init_lpg, lpg_source

    shape = LPGShape()
    source = lpg_source(init_lpg(jax.random.PRNGKey(0), shape), shape, "benchmark")
    lifetimes = DISTRIBUTIONS["grid-small"].lifetimes
    runs = [
        ["train", name, lifetime_from_seed(int(name.split("=")[-1]), lifetimes)] for name in levels
    ]
    job = {"source": source, "seeds": [0, 1], "num_envs": 16}
    ignore = lambda *a, **k: None  # noqa: E731
    start = time.perf_counter()
    shared = train_lpg_job({**job, "runs": runs}, ignore)["runs"]
    shared_s = time.perf_counter() - start
    start = time.perf_counter()
    alone = [train_lpg_job({**job, "runs": [run]}, ignore)["runs"][0] for run in runs]
    alone_s = time.perf_counter() - start
    same = all(a[k] == b[k] for a, b in zip(shared, alone) for k in ("returns", "reference"))
    print(f"lifetimes {[run[2] for run in runs]}; scores equal bit for bit: {same}")
    print("| LPG job | wall s |\n|---|---|")
    print(f"| one program per level | {alone_s:.1f} |\n| shared by scan length | {shared_s:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, default=3)
    parser.add_argument("--timesteps", type=int, default=8192)
    parser.add_argument("--first", type=int, default=1000, help="the first level seed drawn")
    parser.add_argument("--lpg", action="store_true", help="time the LPG evaluator's job")
    args = parser.parse_args()
    if args.lpg:
        print(f"machine: {platform.node()} ({os.cpu_count()} cores)")
        return lpg(list(DISTRIBUTIONS["grid-small"].draws(args.first, args.levels)))
    try:
        from metarl.rl.configs import program_key  # noqa: F401

        design = "level as input"
    except ImportError:
        design = "level as constant"
    task, where = get_task("drift"), backend()
    levels = list(DISTRIBUTIONS["grid-small"].draws(args.first, args.levels))
    settings = CascadeSettings(
        suite="grid-small",
        seeds=2,
        seed_values=[0, 1],
        total_timesteps=args.timesteps,
        probe_seed=0,
        heldout=False,
        train_envs=levels,
        short_run_threshold=-1e9,  # every candidate trains on every level
    )
    keys = list(dict.fromkeys(e.key for e in plan_runs(settings)))
    start = time.perf_counter()
    baselines = stages.train_baselines(task, settings, keys, where)
    baseline_s = time.perf_counter() - start
    references = {}
    for key in keys:
        runs = [r for r in baselines.runs if r["key"] == key]
        returns = [v for r in runs for v in r["final_returns"]]
        references[key] = {
            "baseline_mean": sum(returns) / len(returns),
            "random_mean": baselines.random[runs[0]["env"]],
        }
    artifacts = [
        stages.trace_candidate(task, task.seed_program(n).source, 0, platform=where).artifact
        for n in ("ppo_clip", "lpo")
    ]
    start = time.perf_counter()
    outcomes = stages.evaluate_artifacts(task, artifacts, settings, references, [0, 0], where)
    batch_s = time.perf_counter() - start
    assert all(o.passed for o in outcomes), [o.reason for o in outcomes]
    print(
        f"machine: {platform.node()} ({os.cpu_count()} cores); {design}; {args.levels} grid-small "
        f"levels, {args.timesteps} steps, 2 seeds, 2 candidates"
    )
    print("| design | baseline compile s | baseline wall s | batch compile s | batch wall s |")
    print("|---|---|---|---|---|")
    batch_compile = sum(o.timings.get("compile", 0.0) for o in outcomes)
    print(
        f"| {design} | {baselines.timings.get('compile', 0.0):.1f} | {baseline_s:.1f} | "
        f"{batch_compile:.1f} | {batch_s:.1f} |"
    )


if __name__ == "__main__":
    main()
