"""A run's validation races replayed look by look from its archive, decided with and without
curtailing (`statistics.race`'s `later`: stop a race no later look can win).

    python benchmarks/race_replay.py benchmarks/at_scale/minatar-cpu-r1.db --incumbent r1-0

Each race of the run (its state's `races`, in order: the race number sets its levels,
`statistics.race_plan`) is replayed on the rounds it archived: after each of the challenger's
rounds, the look sees the challenger's runs so far and the incumbent's runs that existed then
(those archived before the race, and those trained in the race's own rounds). The table shows
where each design stops and what it decides (uncurtailed: today's race without `later`; a
race the run held under an older rule may have gone further); saved: the challenger's
(and, in a race that trained the incumbent too, the incumbent's) runs the curtailed design
would not train.
"""

from __future__ import annotations

import argparse
import os
import platform

from metarl.archives.store import Archive
from metarl.evaluation import permutation, roles, statistics
from metarl.rl.suites import SUITES


def rounds(rows: list[dict]) -> list[tuple[int, ...]]:
    """The distinct seed tuples of a candidate's validation rows, in archive order."""
    return list(dict.fromkeys(tuple(int(s) for s in row["seeds"]) for row in rows))


def table(rows: list[dict], seeds: set[tuple[int, ...]], envs: list[str], agg: str):
    """The role table of the rows whose round is in `seeds`."""
    picked = [row for row in rows if tuple(int(s) for s in row["seeds"]) in seeds]
    return roles.role_table(picked, envs, agg)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("archive")
    parser.add_argument("--incumbent", required=True, help="the incumbent every race was against")
    parser.add_argument("--run", default=None, help="the run id (default: the archive's first)")
    args = parser.parse_args()
    print(f"machine: {platform.node()} ({os.cpu_count()} cores); {args}")
    with Archive(args.archive, must_exist=True) as archive:
        run = archive.get_run(args.run) if args.run else archive.runs()[0]
        config, state = run["config"], run["state"]
        envs = list(SUITES[config["suite"]].validation)
        agg = config.get("lr_aggregation") or "best"
        step, cap = int(config["confirm_seeds"]), int(config["race_seeds"])
        theirs_rows = archive.role_evaluations(args.incumbent, "validation")
        known: set[tuple[int, ...]] = set()
        head = "| race | challenger | looks (runs: p, level) | uncurtailed | curtailed | saved |"
        print(head)
        print("|---|---|---|---|---|---|")
        for number, cid in enumerate(state["races"], start=1):
            mine_rows = archive.role_evaluations(cid, "validation")
            if not mine_rows:
                continue
            plan = statistics.race_plan(number, step, cap, float(config["selection_error"]))
            mine = rounds(mine_rows)
            trained_with = set(rounds(theirs_rows)) & set(mine) - known
            looks, decided = [], {}
            for j in range(1, len(mine) + 1):
                ours_seen = set(mine[:j])
                x = table(mine_rows, ours_seen, envs, agg)
                y = table(theirs_rows, known | (trained_with & ours_seen), envs, agg)
                runs = x.shape[0]
                p = permutation.permutation_p_values(x, y).better
                looks.append(f"{runs}: {p:.4f}, {plan.level(runs):.4f}")
                for name, curtail in (("uncurtailed", None), ("curtailed", plan.later(runs))):
                    if name in decided:
                        continue
                    verdict = statistics.race(
                        y, {cid: x}, max_runs=plan.cap, level=plan.level(runs), later=curtail
                    ).verdicts[cid]
                    if verdict != statistics.UNDECIDED:
                        decided[name] = (verdict, runs)
            known |= trained_with
            if "curtailed" not in decided:  # the archived rounds ended undecided (a fault)
                print(f"| {number} | {cid} | {'; '.join(looks)} | undecided | undecided | |")
                continue
            v_cut, n_cut = decided["curtailed"]
            if "uncurtailed" not in decided:  # a curtailed run: its later rounds never ran
                print(
                    f"| {number} | {cid} | {'; '.join(looks)} | undecided at {n_cut} (not run "
                    f"further) | {v_cut} at {n_cut} | |"
                )
                continue
            v_run, n_run = decided["uncurtailed"]
            # the runs after the curtailed look: the challenger's, and the incumbent's where
            # this race trained it
            later_rounds = set(mine[n_cut // step : n_run // step])
            saved = (n_run - n_cut) + step * len(later_rounds & trained_with)
            print(
                f"| {number} | {cid} | {'; '.join(looks)} | {v_run} at {n_run} | "
                f"{v_cut} at {n_cut} | {saved} |"
            )


if __name__ == "__main__":
    main()
