"""Does the offline proposer leave its seeds' neighbourhood? Proposals until a child beats the
best seed on validation, with and without the operators that jump out of it (issue 39).

For each run seed, discovery runs with the offline mutation proposer on the same protocol, one
per arm: **edits** (constant, function, operator, insert, delete, crossover: the seeds'
neighbourhood), **families** (the same, plus whole members of the task's parametric families,
tasks/families.py) and **terms** (edits, families, and the task's building blocks swapped and
added, tasks/building_blocks.py: the `term` operator). Each run counts its proposals until the
first child that wins its validation race against the best seed and holds past the budget
(`--stability`, races.py): the incumbent changes. A run that spends `--budget` proposals
without one says "none".

    python benchmarks/operators.py --protocol minatar-cpu --budget 40 --rng-seeds 0 1 2
    python benchmarks/operators.py --suite smoke --budget 8 --rng-seeds 0    # minutes: a look

Prints one table; paste it into benchmarks/RESULTS.md with the machine's name. Each arm's
archive is kept under `--folder` (default a temporary one), so a run can be inspected or
resumed (`metarl resume RUN --archive PATH --budget N`).
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

ARMS = ("edits", "families", "terms")
# the operators each arm leaves out of the proposer's default weights
LEFT_OUT = {"edits": ("family", "term"), "families": ("term",), "terms": ()}


def run_arm(arm: str, args, rng_seed: int, folder: Path) -> dict:
    """One discovery run of `arm`; its proposals until the first new incumbent (or None)."""
    from metarl.archives import Archive
    from metarl.discovery.config import DiscoverConfig
    from metarl.discovery.loop import DiscoveryLoop
    from metarl.discovery.proposers.mutation import DEFAULT_WEIGHTS, MutationProposer

    weights = {op: w for op, w in DEFAULT_WEIGHTS.items() if op not in LEFT_OUT[arm]}
    options = dict(budget=args.budget, rng_seed=rng_seed, max_time=None, protocol=args.protocol)
    if args.suite:
        options["suite"] = args.suite
    config = DiscoverConfig(**options)
    found = {"at": None, "id": None, "races": 0, "refused": 0}

    def on_event(kind: str, data: dict) -> None:
        if kind == "confirm" and data.get("verdict") != "undecided":
            found["races"] += 1
        if kind == "stability" and data.get("verdict") in ("worse", None):
            found["refused"] += 1

    path = folder / f"{arm}-{rng_seed}.db"
    start = time.perf_counter()
    with Archive(path) as archive:
        loop = DiscoveryLoop(archive, config, MutationProposer(weights=weights), on_event=on_event)
        result = loop.run()
        history = loop.state.incumbents  # [{generation, id, seq}], the seeds' first
        seeds = len(loop.state.seed_ids)
        children = archive.child_count(loop.run_id)
        counts = dict(loop.proposer.get_state().get("operator_counts", {}))
    if len(history) > 1:  # the children proposed up to the end of the generation that crowned
        found["at"], found["id"] = history[1]["seq"] - seeds + 1, history[1]["id"]
    found.update(
        wall_s=time.perf_counter() - start,
        status=result.status,
        children=children,
        families=sum(n for op, n in counts.items() if op.startswith("family")),
        terms=sum(n for op, n in counts.items() if "term" in op.split("+")),
        archive=str(path),
    )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocol", default="quick")
    parser.add_argument("--suite", default=None, help="another suite under the protocol")
    parser.add_argument("--budget", type=int, default=24)
    parser.add_argument("--rng-seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--folder", default=None)
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    args = parser.parse_args()
    folder = Path(args.folder or tempfile.mkdtemp(prefix="metarl-operators-"))
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for rng_seed in args.rng_seeds:
        for arm in args.arms:
            print(f"run seed {rng_seed}, {arm} ...", flush=True)
            rows.append((rng_seed, arm, run_arm(arm, args, rng_seed, folder)))
            print(table_row(*rows[-1]), flush=True)  # each arm as it ends: hours in all
    where = f"suite {args.suite}, " if args.suite else ""
    print(
        f"\nprotocol {args.protocol}, {where}budget {args.budget} children "
        f"({platform.node()}, archives in {folder})\n"
    )
    print(
        "| run seed | operators | children | family draws | term edits | races decided | "
        "refused past the budget | first new incumbent at child | wall |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---|---:|")
    for row in rows:
        print(table_row(*row))


def table_row(rng_seed: int, arm: str, found: dict) -> str:
    """One arm's line of the table."""
    at = f"{found['at']} ({found['id']})" if found["at"] else "none"
    return (
        f"| {rng_seed} | {arm} | {found['children']} | {found['families']} | "
        f"{found['terms']} | {found['races']} | {found['refused']} | {at} | "
        f"{found['wall_s'] / 60:.1f} min |"
    )


if __name__ == "__main__":
    main()
