"""Discovery throughput: candidates per hour on the `smoke` and `classic` suites, and where the
cascade stops candidates (fraction per stage), with the offline mutation proposer.

    python benchmarks/discovery.py                         # smoke + classic, suite budgets
    python benchmarks/discovery.py --suites smoke --budget 20
    python benchmarks/discovery.py --classic-timesteps 100000 --seeds 2   # the demo setting

Each suite runs in a fresh archive (seeds evaluated once there, baselines from the on-disk
cache, which is warmed first and timed apart). Candidates per hour counts children only, over
the time from the first child's proposal to the end of the run (seed evaluation and baseline
training excluded; confirmations of elites on more seeds included, as in a real run).
Prints one table; paste it into benchmarks/RESULTS.md with the machine's name.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path


def _machine() -> str:
    from metarl.platform import device_description

    return f"{platform.node()} · {device_description()} · python {platform.python_version()}"


def run_suite(
    suite: str,
    budget: int,
    timesteps: int | None,
    seeds: int | None,
    workers: int,
    rng_seed: int,
    folder: Path,
    children: int,
) -> dict:
    from metarl.archives import Archive
    from metarl.archives.queries import leaderboard
    from metarl.discovery.config import DiscoverConfig
    from metarl.discovery.loop import DiscoveryLoop
    from metarl.discovery.proposers.mutation import MutationProposer

    config = DiscoverConfig(
        suite=suite,
        budget=budget,
        timesteps=timesteps or 0,
        seeds=seeds,
        workers=workers,
        rng_seed=rng_seed,
        max_time=None,
        children=children,
    ).resolved()
    marks: dict[str, float] = {"start": time.monotonic()}

    def on_event(kind: str, data: dict) -> None:
        if kind == "candidate" and data.get("is_seed"):
            marks["seeds_done"] = time.monotonic()
        if kind == "candidate" and not data.get("is_seed"):
            print(
                f"  [{suite}] {data['id']:>6} {data.get('operator') or '':<22} {data['status']:<9}"
                f" {data.get('stage') or '':<7} fitness {data.get('fitness')}",
                flush=True,
            )

    path = folder / f"bench-{suite}.db"
    with Archive(path) as archive:
        loop = DiscoveryLoop(archive, config, MutationProposer(), on_event=on_event)
        result = loop.run()
        end = time.monotonic()
        rows = [r for r in archive.run_candidates(result.run_id) if not r["is_seed"]]
        seeds = [r for r in archive.run_candidates(result.run_id) if r["is_seed"]]
        board = leaderboard(archive, run_id=result.run_id, limit=1000)
    child_s = end - marks.get("seeds_done", marks["start"])
    fates: dict[str, int] = {}
    for row in rows:
        if row["status"] == "passed":
            key = "passed"
        elif row["status"] in ("duplicate",):
            key = "duplicate"
        elif row["status"] == "no_code":
            key = "no program"
        else:
            key = row["stage"]
        fates[key] = fates.get(key, 0) + 1
    baseline_seed = next((s for s in seeds if s["name"] == "ppo_clip"), None)
    reference = baseline_seed["fitness"] if baseline_seed else 1.0
    beat = [
        r for r in board.rows if not r.is_seed and r.fitness is not None and r.fitness >= reference
    ]
    return {
        "suite": suite,
        "timesteps": config.timesteps,
        "seeds": config.seeds,
        "workers": workers,
        "children": len(rows),
        "child_s": child_s,
        "seed_s": marks.get("seeds_done", marks["start"]) - marks["start"],
        "per_hour": 3600 * len(rows) / child_s if child_s > 0 else float("nan"),
        "fates": fates,
        "beat_seed": len(beat),
        "best": max((r.fitness for r in board.rows if not r.is_seed), default=None),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suites", default="smoke,classic")
    parser.add_argument(
        "--budget", type=int, default=None, help="children per suite (default: smoke 16, classic 8)"
    )
    parser.add_argument("--smoke-timesteps", type=int, default=0, help="0: the suite's own budget")
    parser.add_argument(
        "--classic-timesteps", type=int, default=0, help="0: the suite's own budget"
    )
    parser.add_argument("--seeds", type=int, default=None, help="default: the suite's own")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--children", type=int, default=4)
    parser.add_argument("--rng-seed", type=int, default=0, help="RNG seed of the search")
    parser.add_argument("--keep", type=Path, default=None, help="folder to keep the archives in")
    args = parser.parse_args(argv)

    folder = args.keep or Path(tempfile.mkdtemp(prefix="metarl-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    results = []
    for suite in [s.strip() for s in args.suites.split(",") if s.strip()]:
        budget = args.budget or {"smoke": 16, "classic": 8}.get(suite, 8)
        timesteps = {"smoke": args.smoke_timesteps, "classic": args.classic_timesteps}.get(suite, 0)
        print(f"{suite}: {budget} children ...", flush=True)
        results.append(
            run_suite(
                suite,
                budget,
                timesteps,
                args.seeds,
                args.workers,
                args.rng_seed,
                folder,
                args.children,
            )
        )

    stages = ["passed", "static", "probes", "short", "full", "duplicate", "no program"]
    print()
    print(f"machine: {_machine()}")
    print(f"archives: {folder}  cache: {os.environ.get('METARL_CACHE_DIR', '~/.cache/metarl')}")
    header = [
        "suite",
        "steps/env",
        "seeds",
        "workers",
        "children",
        "seeds+baselines s",
        "children s",
        "cand/hour",
        *[f"{s} %" for s in stages],
        ">= ppo_clip",
        "best",
    ]
    lines = [header]
    for r in results:
        n = max(1, r["children"])
        lines.append(
            [
                r["suite"],
                str(r["timesteps"]),
                str(r["seeds"]),
                str(r["workers"]),
                str(r["children"]),
                f"{r['seed_s']:.0f}",
                f"{r['child_s']:.0f}",
                f"{r['per_hour']:.0f}",
                *[f"{100 * r['fates'].get(s, 0) / n:.0f}" for s in stages],
                str(r["beat_seed"]),
                "—" if r["best"] is None else f"{r['best']:.3f}",
            ]
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    for i, row in enumerate(lines):
        print(" | ".join(cell.rjust(w) for cell, w in zip(row, widths)))
        if i == 0:
            print("-+-".join("-" * w for w in widths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
