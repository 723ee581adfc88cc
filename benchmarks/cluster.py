"""What running sandboxed workers as Ray tasks costs, next to a batch's training time.

    python benchmarks/cluster.py                      # smoke suite, 8192 steps, 2 seeds, batch 4
    python benchmarks/cluster.py --batch 8 --repeats 5
    python benchmarks/cluster.py --suite classic --timesteps 100000 --ray-cpus 4

Why: with `--executor ray` every worker job (a candidate's tracer, a batch share's trainer) is a
Ray task (executors.carry) that starts a cold sandboxed worker on its node, where the local
executor hands jobs to pre-warmed spares. This measures what that costs per job on one machine,
and what splitting a batch's training into shares (`workers=2`, one Ray task each) buys back.

One batch of `--batch` distinct drift candidates (the LPO seed with other alpha/beta constants;
honest programs that train) is scored with `Evaluator.evaluate_batch` in three configurations:

1. `local`, workers=1: today's design, the reference;
2. `ray`, workers=1: each job a Ray task on a private local Ray instance (`--ray-cpus` CPUs);
3. `ray`, workers=2: tracers two at a time, the training split into two shares at once.

Baselines are trained or loaded first (the default cache, METARL_CACHE_DIR when set) and every
configuration scores the batch once untimed (compile caches and Ray workers warm); the timed
repeats are interleaved across configurations, each after a settle pause (pre-warmed local
spares finish preloading, as they would during an LLM call). Columns: median wall seconds of
`evaluate_batch`, candidates per hour, the Ray overhead per worker job ((ray - local) wall at
workers=1 over the batch's jobs: one tracer per candidate and one trainer), the training time
(compile + run summed over candidates: the trainer's own work) and the trainers' round trips
(summed over shares) with their share of the wall time. Every configuration must give each
candidate exactly the local fitness ("same scores as local"); the script exits with status 1
after the tables when one does not. Paste the tables into benchmarks/RESULTS.md with the
machine's name.

The executor starts the private Ray instance itself (`connect_ray("local")`, as
`--ray-address local` would); `connect_ray` takes no CPU count, so it is passed the way Ray's
autoscaler does (RAY_OVERRIDE_RESOURCES), with RAY_TMPDIR keeping the instance's files away from
any cluster of this machine's /tmp/ray; the instance is shut down at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

ALPHAS = (1.5, 1.8, 2.2, 2.5)
CONFIGS = (("local", 1), ("ray", 1), ("ray", 2))  # (executor, workers)


def candidates(count: int) -> list[str]:
    """`count` distinct edits of the LPO seed: alpha 1.5, 1.8, 2.2, 2.5, then beta raised too."""
    from metarl.tasks import get_task

    seed = next(p for p in get_task("drift").seed_programs() if p.name == "lpo").source
    if "alpha = 2.0\n" not in seed or "beta = 0.6\n" not in seed:
        raise SystemExit("the LPO seed no longer sets alpha = 2.0 and beta = 0.6")
    sources = []
    for i in range(count):
        alpha, beta = ALPHAS[i % len(ALPHAS)], 0.6 + 0.1 * (i // len(ALPHAS))
        sources.append(
            seed.replace("alpha = 2.0\n", f"alpha = {alpha}\n").replace(
                "beta = 0.6\n", f"beta = {beta:.2f}\n"
            )
        )
    return sources


def ray_environment(cpus: int, temp_dir: str) -> None:
    """What the private Ray instance that `connect_ray("local")` starts will have: `cpus` CPUs
    (connect_ray takes no CPU count) and its session files under `temp_dir` (RAY_TMPDIR)."""
    os.environ["RAY_OVERRIDE_RESOURCES"] = json.dumps({"CPU": cpus})
    os.environ["RAY_TMPDIR"] = temp_dir


def settle(evaluator, seconds: float) -> None:
    """Wait for the local spares to be ready, then `seconds` more (they preload meanwhile)."""
    executor = evaluator._executor
    if hasattr(executor, "pool"):
        for role in ("tracer", "trainer"):
            for worker in list(executor.pool(role)._idle):
                worker.wait_ready()
    time.sleep(seconds)


def score(evaluator, sources: list[str]) -> dict:
    """One timed `evaluate_batch`: wall, outcomes' scores, training and trainer seconds."""
    start = time.perf_counter()
    outcomes = evaluator.evaluate_batch(sources, "drift")
    wall = time.perf_counter() - start
    train = sum(o.timings.get("compile", 0.0) + o.timings.get("run", 0.0) for o in outcomes)
    trainers = {}  # one trainer job per share: its round trip, once
    for o in outcomes:
        job = (o.sandbox.get("worker_pid"), o.sandbox.get("workdir"))
        trainers[job] = o.timings.get("sandbox", 0.0) - o.timings.get("trace", 0.0)
    return {
        "wall": wall,
        "train": train,
        "trainer": sum(trainers.values()),
        "shares": len(trainers),
        "passed": sum(o.passed for o in outcomes),
        "scores": [(o.stage, o.fitness) for o in outcomes],
        "reasons": [o.reason for o in outcomes if not o.passed],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=4, help="candidates in the batch")
    parser.add_argument("--suite", default="smoke")
    parser.add_argument("--timesteps", type=int, default=8192, help="per env; 0: the suite's")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ray-cpus", type=int, default=2, help="CPUs of the local Ray instance")
    parser.add_argument("--settle", type=float, default=6.0, help="seconds before each repeat")
    parser.add_argument("--json", action="store_true", help="also print the raw rows as JSON")
    args = parser.parse_args()

    from metarl.evaluation.cascade import Evaluator
    from metarl.evaluation.executors import ExecutorSettings, RayExecutor
    from metarl.evaluation.settings import CascadeSettings
    from metarl.platform import device_description

    settings = CascadeSettings(
        suite=args.suite,
        seeds=args.seeds,
        total_timesteps=args.timesteps or None,
        heldout=False,  # a child's evaluation (records.cascade_settings)
        probe_seed=0,  # fixed probe inputs: the scores are comparable across configurations
    )
    sources = candidates(args.batch)
    temp_dir = tempfile.mkdtemp(prefix="ray-bench-", dir="/tmp")  # short: Ray's socket paths
    ray_environment(args.ray_cpus, temp_dir)
    evaluators = {}
    try:
        for kind, workers in CONFIGS:
            executor = ExecutorSettings(kind, ray_address="local" if kind == "ray" else None)
            evaluator = Evaluator(settings, workers=workers, executor=executor)
            if kind == "ray":
                if not isinstance(evaluator._executor, RayExecutor):
                    raise SystemExit(f"asked for the ray executor, got {evaluator._executor}")
                ray = evaluator._executor.ray
                cpus = ray.cluster_resources().get("CPU", 0)
                if cpus != args.ray_cpus:
                    raise SystemExit(f"the local Ray instance has {cpus} CPUs, not {args.ray_cpus}")
            evaluators[(kind, workers)] = evaluator
            evaluator.baseline("drift")  # trained or loaded: not timed
            evaluator.evaluate_batch(sources, "drift")  # warm-up: compile caches, Ray workers
        runs = {config: [] for config in CONFIGS}
        for _ in range(args.repeats):
            for config in CONFIGS:  # interleaved: the machine's noise hits every row alike
                settle(evaluators[config], args.settle)
                runs[config].append(score(evaluators[config], sources))
    finally:
        for evaluator in evaluators.values():
            evaluator.close()
        if "ray" in sys.modules:
            sys.modules["ray"].shutdown()  # the private instance this process started
        shutil.rmtree(temp_dir, ignore_errors=True)

    rows = summarise(runs, args.batch)
    steps = f"{args.timesteps} steps" if args.timesteps else "the suite's steps"
    print(f"# {platform.node()} · {device_description()} · Ray {ray.__version__}, {cpus:g} CPUs")
    print(
        f"# suite {args.suite}, {steps} per env, {args.seeds} seeds, batch of {args.batch}, "
        f"median of {args.repeats}"
    )
    print_table(rows)
    reference, one = rows[0], rows[1]
    jobs = args.batch + 1
    print(
        f"\nRay at workers=1 costs {one['overhead']:+.2f} s per worker job ({jobs} jobs: "
        f"{args.batch} tracers, 1 trainer) next to {reference['train']:.1f} s of training per "
        f"batch; workers=2 runs at {rows[2]['per_hour'] / reference['per_hour']:.2f}x the "
        "local candidates/h."
    )
    if args.json:
        print(json.dumps({f"{k}/{w}": r for (k, w), r in runs.items()}))
    wrong = [row for row in rows if not row["same"]]
    if wrong:
        for row in wrong:
            print(f"DIFFERENT SCORES: {row['name']}: {row['scores']}", file=sys.stderr)
        print(f"local: {reference['scores']}", file=sys.stderr)
        raise SystemExit(1)


def summarise(runs: dict, batch: int) -> list[dict]:
    """One row per configuration: medians, and whether every repeat scored like local's first."""
    expected = runs[CONFIGS[0]][0]["scores"]
    rows = []
    for kind, workers in CONFIGS:
        repeats = runs[(kind, workers)]
        wall = statistics.median(r["wall"] for r in repeats)
        rows.append(
            {
                "name": f"{kind}, workers={workers}",
                "wall": wall,
                "walls": [r["wall"] for r in repeats],
                "per_hour": batch * 3600 / wall,
                "train": statistics.median(r["train"] for r in repeats),
                "trainer": statistics.median(r["trainer"] for r in repeats),
                "shares": repeats[0]["shares"],
                "size": batch,
                "passed": repeats[0]["passed"],
                "same": all(r["scores"] == expected for r in repeats),
                "scores": [r["scores"] for r in repeats],
            }
        )
    local_wall = rows[0]["wall"]
    for row, (kind, workers) in zip(rows, CONFIGS):
        row["overhead"] = (row["wall"] - local_wall) / (batch + 1) if kind == "ray" else None
        if workers != 1:
            row["overhead"] = None  # defined at workers=1 only: the jobs overlap otherwise
    return rows


def print_table(rows: list[dict]) -> None:
    columns = ["configuration", "passed", "wall s (median)", "walls s", "candidates/h"]
    columns += ["vs local", "Ray overhead s/job", "train s", "trainers s (shares)"]
    columns += ["trainers % of wall", "same scores as local"]
    print("| " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * (len(columns) - 2) + "---|")
    for row in rows:
        overhead = "-" if row["overhead"] is None else f"{row['overhead']:+.2f}"
        print(
            f"| {row['name']} | {row['passed']}/{row['size']} | {row['wall']:.1f} | "
            f"{' '.join(f'{w:.1f}' for w in row['walls'])} | {row['per_hour']:.0f} | "
            f"{row['per_hour'] / rows[0]['per_hour']:.2f}x | {overhead} | {row['train']:.1f} | "
            f"{row['trainer']:.1f} ({row['shares']}) | {100 * row['trainer'] / row['wall']:.0f} | "
            f"{'yes' if row['same'] else 'no'} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
