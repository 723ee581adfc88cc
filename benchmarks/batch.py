"""Generation-batched evaluation against one program per candidate, in the same run.

    python benchmarks/batch.py                                # demo setting, generations of 4, 16
    python benchmarks/batch.py --setting classic --sizes 4    # classic at its full budget
    python benchmarks/batch.py --setting minatar --sizes 8 32 # on a GPU
    python benchmarks/batch.py --before bd01197               # also the previous commit's design

For each generation size the same distinct drift candidates (clip ranges and quadratic
penalties; honest programs that train) are scored through the real sandboxed cascade twice,
each time by a fresh Evaluator with the baselines already cached:

- `single`: the previous design, one candidate per trainer and compiled program
  (`Evaluator.evaluate`, one after the other, as the loop did with `workers=1`);
- `batched`: `Evaluator.evaluate_batch`, one trainer and one compiled program per environment
  for the whole generation.

`--before REF` also runs the `single` design on commit REF's own package (a temporary git
worktree on PYTHONPATH, its own cache directory): the design as it was before batching, where
the short run was a separate program with its own compile.

Columns: wall seconds for the generation, candidates per hour, compile seconds summed over the
generation (a batched candidate carries its share of the batch's compile) and their share of
the wall time, and the largest fitness difference between the two designs (0 means every
candidate's numbers are unchanged by batching). Paste the table into benchmarks/RESULTS.md
with the machine's name.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time

from worktree import run_at_commit

SETTINGS = {  # name -> (suite, per-env timesteps or None for the suite's own, seeds)
    "demo": ("classic", 100_000, 2),  # `metarl discover`'s defaults
    "classic": ("classic", None, 4),  # the suite's full budget (5e5 steps per env)
    "minatar": ("minatar", None, 8),  # for a GPU
}


def candidates(count: int) -> list[str]:
    """`count` distinct honest drifts: PPO-style clips of several ranges, quadratic penalties."""
    sources = []
    for i in range(count):
        if i % 2 == 0:
            eps = 0.1 + 0.2 * i / max(1, count)
            body = (
                f"jax.nn.relu((ratio - jnp.clip(ratio, {1 - eps:.4f}, {1 + eps:.4f})) * advantage)"
            )
        else:
            body = f"{0.5 + 2.0 * i / count:.4f} * jnp.abs(advantage) * jnp.square(ratio - 1.0)"
        sources.append(f"def drift(ratio, advantage, epsilon):\n    return {body}\n")
    return sources


def measure(design: str, sources: list[str], settings) -> dict:
    from metarl.evaluation.cascade import Evaluator

    with Evaluator(settings, workers=1) as evaluator:
        evaluator.references("drift")  # cached baselines, not timed
        start = time.perf_counter()
        if design == "single":
            outcomes = [evaluator.evaluate(source, "drift") for source in sources]
        else:
            outcomes = evaluator.evaluate_batch(sources, "drift")
        wall = time.perf_counter() - start
    compile_s = sum(o.timings.get("compile", 0.0) for o in outcomes)
    return {
        "wall": wall,
        "per_hour": len(sources) * 3600 / wall,
        "compile": compile_s,
        "share": compile_s / wall,
        "passed": sum(o.passed for o in outcomes),
        "fitness": [o.fitness for o in outcomes],
    }


def measure_commit(ref: str, argv: list[str]) -> list[dict]:
    """This script's `single` rows, run on commit REF's package in a temporary worktree."""
    script = os.path.abspath(__file__)
    out = run_at_commit(ref, script, [*argv, "--designs", "single", "--json"])
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="demo")
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 16])
    parser.add_argument(
        "--designs",
        nargs="+",
        choices=["single", "batched"],
        default=["single", "batched"],
        help="which designs to run (batched alone: the compile share of a large generation)",
    )
    parser.add_argument("--before", metavar="REF", help="also run REF's `single` design")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON line")
    args = parser.parse_args()
    os.environ.setdefault("METARL_CACHE_DIR", tempfile.mkdtemp(prefix="metarl-bench-cache-"))
    # lazy: METARL_CACHE_DIR must be set before metarl reads it
    from metarl.evaluation.settings import CascadeSettings
    from metarl.platform import device_description

    suite, timesteps, seeds = SETTINGS[args.setting]
    settings = CascadeSettings(suite=suite, total_timesteps=timesteps, seeds=seeds, probe_seed=0)
    rows = []
    for size in args.sizes:
        sources = candidates(size)
        for design in args.designs:
            rows.append({"size": size, "design": design, **measure(design, sources, settings)})
    if args.json:
        print(json.dumps(rows))
        return
    if args.before:
        argv = ["--setting", args.setting, "--sizes", *map(str, args.sizes)]
        for row in measure_commit(args.before, argv):
            rows.append({**row, "design": f"single @ {args.before}"})
    print(f"# {platform.node()} · {device_description()} · setting {args.setting}: suite {suite},")
    print(f"# timesteps {timesteps or 'suite'} per env, {seeds} seeds, heldout scored")
    print_table(rows)


def print_table(rows: list[dict]) -> None:
    """One markdown row per (size, design): the previous commit's design first (when run), then
    `single`, then `batched`, each with its speed relative to the first."""
    columns = ["size", "design", "passed", "wall s", "candidates/h", "compile s", "compile %"]
    columns += ["max |Δfitness| vs batched", "candidates/h vs first"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for size in sorted({row["size"] for row in rows}):
        group = [row for row in rows if row["size"] == size]
        group.sort(key=lambda r: ("@" not in r["design"], r["design"] != "single"))
        batched = next((row for row in group if row["design"] == "batched"), None)
        for row in group:
            diffs = [
                abs(a - b)
                for a, b in zip(row["fitness"], batched["fitness"] if batched else [])
                if a is not None and b is not None
            ]
            print(
                f"| {size} | {row['design']} | {row['passed']}/{size} | {row['wall']:.1f} | "
                f"{row['per_hour']:.0f} | {row['compile']:.1f} | {100 * row['share']:.0f} | "
                f"{max(diffs, default=float('nan')):.3g} | "
                f"{row['per_hour'] / group[0]['per_hour']:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()
