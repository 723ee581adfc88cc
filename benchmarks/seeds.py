"""Baseline work per candidate: fixed training seeds (the previous design) against seeds drawn
from a secret per-run pool (evaluation/seeds.py), on the same sequence of batches.

A discovery-like run is replayed through the real Evaluator (sandboxed workers, a cold
baseline cache each): one batch of the seed programs, `--batches` child batches of
`--children` candidates, and `--confirmations` confirmations on twice the seeds. With fixed
seeds the baseline is trained once for the selection seeds and once for the confirmation
seeds; with drawn seeds it is trained once per seed of the pool that a batch draws first.

    python benchmarks/seeds.py                         # smoke suite, 8192 steps, 2 seeds
    python benchmarks/seeds.py --timesteps 100000 --suite classic   # the demo's setting

Prints one row per design: baseline jobs, baseline seconds, candidate-training seconds, and
baseline seconds per candidate.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

from metarl.evaluation.cascade import Evaluator
from metarl.evaluation.seeds import draw_pool, pinned_extension, pool_size
from metarl.evaluation.settings import CascadeSettings
from metarl.tasks import get_task


def replay(args, design: str) -> dict:
    """Run the batch sequence with `design` ("fixed" or "drawn") in a cold cache."""
    os.environ["METARL_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"metarl-bench-seeds-{design}-")
    task = get_task("drift")
    programs = [p.source for p in task.seed_programs()]
    base = dict(suite=args.suite, total_timesteps=args.timesteps, heldout=False, skip_short=True)
    fixed = list(range(args.seeds))
    pool = list(draw_pool(pool_size(args.seeds, 2 * args.seeds)))
    child = CascadeSettings(
        seeds=args.seeds,
        seed_values=fixed if design == "fixed" else None,
        seed_pool=None if design == "fixed" else pool,
        **base,
    )
    confirm = CascadeSettings(
        seeds=2 * args.seeds,
        seed_values=pinned_extension(fixed, 2 * args.seeds, ()) if design == "fixed" else None,
        seed_pool=None if design == "fixed" else pool,
        **base,
    )
    stats = {"jobs": 0, "baseline_s": 0.0, "train_s": 0.0, "candidates": 0}
    for settings, batches, size in (
        (child, 1 + args.batches, args.children),
        (confirm, args.confirmations, 1),
    ):
        with Evaluator(settings, workers=1, prewarm=False) as evaluator:
            train_baselines = evaluator._train_baselines

            def timed(*a, _inner=train_baselines, **k):
                start = time.perf_counter()
                try:
                    return _inner(*a, **k)
                finally:
                    stats["jobs"] += 1
                    stats["baseline_s"] += time.perf_counter() - start

            evaluator._train_baselines = timed
            for _ in range(batches):
                sources = [programs[i % len(programs)] for i in range(size)]
                before = stats["baseline_s"]
                start = time.perf_counter()
                outcomes = evaluator.evaluate_batch(sources, "drift")
                stats["train_s"] += time.perf_counter() - start - (stats["baseline_s"] - before)
                stats["candidates"] += len(outcomes)
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="smoke")
    parser.add_argument("--timesteps", type=int, default=8192)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--batches", type=int, default=4, help="child batches after the seeds")
    parser.add_argument("--children", type=int, default=2)
    parser.add_argument("--confirmations", type=int, default=2)
    args = parser.parse_args()
    print(
        f"machine: {platform.node()} ({os.cpu_count()} cores); suite {args.suite}, "
        f"{args.timesteps} steps, {args.seeds} seeds, 1 + {args.batches} batches of "
        f"{args.children}, {args.confirmations} confirmations on {2 * args.seeds} seeds"
    )
    print("| design | baseline jobs | baseline s | candidate s | candidates | baseline s / cand |")
    print("|---|---|---|---|---|---|")
    for design in ("fixed", "drawn"):
        s = replay(args, design)
        print(
            f"| {design} | {s['jobs']} | {s['baseline_s']:.1f} | {s['train_s']:.1f} | "
            f"{s['candidates']} | {s['baseline_s'] / max(1, s['candidates']):.2f} |"
        )


if __name__ == "__main__":
    main()
