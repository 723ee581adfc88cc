"""The four meta-learning methods on one task, suite, seeds and budget, on one leaderboard.

    python benchmarks/methods.py                               # CPU-sized: classic at 1e5 steps
    python benchmarks/methods.py --population 64 --generations 20 --timesteps 0   # the paper's ES

In one fresh archive, through the real CLI (each step is the command a researcher types):
1. `metarl discover` (mutation proposer) for `--budget` children;
2. `metarl es` for `--generations` generations, exporting the mean every `--export-every`;
3. `metarl distil` of the best ES export into a width-`--distil-hidden` network;
4. `metarl symbolic` of the best ES export.
Every candidate is scored by the same cascade with the same training seeds and budget, so the
final `metarl leaderboard --all` compares them directly. The table gives each step's wall
time, ES generations per hour, and each method's best candidate with its 95% interval over
seeds and its held-out score (never seen by any selection).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

METARL = [sys.executable, "-m", "metarl.cli.app"]


def run(args: list[str]) -> tuple[float, str]:
    """Run one metarl command; its wall seconds and output (raises on failure)."""
    start = time.perf_counter()
    done = subprocess.run(METARL + args, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args[:1])} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, done.stdout


def board(archive: str, method: str | None = None) -> list[dict]:
    args = ["leaderboard", "--all", "--json", "--limit", "100", "--archive", archive]
    _, out = run(args + (["--method", method] if method else []))
    return json.loads(out) if out.strip().startswith("[") else []


def interval(value, ci) -> str:
    if value is None:
        return "—"
    return f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else f"{value:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", default="classic")
    parser.add_argument("--timesteps", type=int, default=100_000)
    parser.add_argument("--train-seeds", type=int, default=2)
    parser.add_argument("--budget", type=int, default=6, help="discover's children")
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--export-every", type=int, default=2)
    parser.add_argument("--distil-hidden", type=int, default=32)
    parser.add_argument("--distil-steps", type=int, default=10_000)
    parser.add_argument("--symbolic-seconds", type=int, default=60)
    parser.add_argument("--archive", help="default: a fresh temporary file")
    args = parser.parse_args()
    archive = args.archive or str(Path(tempfile.mkdtemp(prefix="metarl-methods-")) / "m.db")
    common = ["--suite", args.suite, "--timesteps", str(args.timesteps), "--archive", archive]
    walls = {}
    walls["discover"], _ = run(
        ["discover", *common, "--budget", str(args.budget), "--seeds", str(args.train_seeds)]
        + ["--max-time", "none", "--no-live", "--quiet"]
    )
    es_args = ["es", *common, "--train-seeds", str(args.train_seeds)]
    es_args += ["--population", str(args.population), "--generations", str(args.generations)]
    walls["es"], _ = run(es_args + ["--export-every", str(args.export_every)])
    exports = board(archive, "es")
    if not exports:
        raise SystemExit("no ES export passed the cascade; nothing to distil")
    best = exports[0]["id"]
    walls["distil"], _ = run(
        ["distil", best, "--hidden", str(args.distil_hidden), "--steps", str(args.distil_steps)]
        + ["--archive", archive]
    )
    walls["symbolic"], _ = run(
        ["symbolic", best, "--search-time", str(args.symbolic_seconds), "--archive", archive]
    )
    rows = board(archive)
    print(f"# {platform.node()} · {os.cpu_count()} cores · suite {args.suite}, ", end="")
    print(f"{args.timesteps} steps per env, {args.train_seeds} training seeds; archive {archive}")
    print(
        f"# ES: population {args.population}, {args.generations} generations in "
        f"{walls['es']:.0f} s (exports included): "
        f"{args.generations * 3600 / walls['es']:.1f} generations/hour"
    )
    print("| method | wall s | passed | best | fitness [95% CI] | held-out [95% CI] |")
    print("|---|---|---|---|---|---|")
    for method in ("discovery", "es", "distil", "symbolic"):
        mine = [r for r in rows if r["method"] == method and not r["is_seed"]]
        top = mine[0] if mine else None
        print(
            f"| {method} | {walls[method if method != 'discovery' else 'discover']:.0f} | "
            f"{len(mine)} | {top['id'] if top else '—'} | "
            f"{interval(top['fitness'], top['fitness_ci']) if top else '—'} | "
            f"{interval(top['heldout'], top['heldout_ci']) if top else '—'} |"
        )
    print()
    print("| # | candidate | method | fitness [95% CI] | held-out [95% CI] |")
    print("|---|---|---|---|---|")
    for row in rows[:15]:
        print(
            f"| {row['rank']} | {row['id']} {row['name']} | {row['method']} | "
            f"{interval(row['fitness'], row['fitness_ci'])} | "
            f"{interval(row['heldout'], row['heldout_ci'])} |"
        )


if __name__ == "__main__":
    main()
