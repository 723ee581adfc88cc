"""The long run of issue 39, recorded as it comes out: one `metarl discover --protocol
minatar-cpu` with the offline proposer, long enough for >= 60 candidates, then its incumbent
re-measured on the test games on 16 fresh seeds against PPO-clip and LPO, and (with
`--discogen`) scored in DiscoGen's own harness at the same budget.

    python benchmarks/at_scale.py --archive runs/at-scale.db --budget 64 --max-time 2h
    python benchmarks/at_scale.py --archive runs/at-scale.db --budget 64   # continues the run
    python benchmarks/at_scale.py --archive runs/at-scale.db --skip-search --discogen

1. **search**: `metarl discover --protocol minatar-cpu` when the archive has no run, else
   `metarl discover --resume RUN --budget B` (a killed or stopped slice continues exactly;
   `--max-time` is the run's total wall time). Selection sees train and validation games only.
2. **test**: the run's incumbent (as `metarl show RUN` names it, or `--candidate`), LPO and
   PPO-clip as one `metarl evaluate` batch per test game (the sandboxed cascade, full budget,
   that game alone), on `--test-seeds` seeds drawn fresh for the batch: the three share each
   game's seeds, and PPO-clip *is* the baseline, so its per-seed scores are the
   normalisation's. One process per game, so the two CPU cores both train. Per run (seed x
   game): (return - random) / (PPO-clip's mean - random) on that game's seeds; then IQM with
   a stratified-bootstrap interval and the probability of improvement over each reference
   (statistics.py, rliable's estimators), and its verdict.
3. **discogen** (optional): `metarl evaluate ID --harness discogen --test --set
   TOTAL_TIMESTEPS=...` for the incumbent and LPO (DiscoGen's own 8 seeds x 10 rates; its
   base is its PPO-clip loss), archived beside ours, so `metarl report RUN` shows it.

Prints markdown tables and writes `<archive>.at_scale.json` (every per-seed return, the seeds,
the commands). Paste the tables into benchmarks/RESULTS.md with the machine's name.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

PROTOCOL = "minatar-cpu"
SUITE = "discobench"  # the protocol's suite: DiscoGen's MinAtar games and config
# one `metarl evaluate` batch per test game, so both CPU cores train
TEST_GAMES = ("Asterix-MinAtar", "SpaceInvaders-MinAtar")
TIMESTEPS = 1_000_000  # the protocol's budget
REFERENCES = ("lpo", "ppo_clip")  # the task's seed programs: LPO's drift and the baseline


def metarl(*args: str) -> list[str]:
    """The CLI under this interpreter (so a worktree on PYTHONPATH is the code that runs)."""
    return [sys.executable, "-m", "metarl.cli.app", *args]


def search(args) -> str:
    """Start the run, or continue the archive's latest one; its id."""
    from metarl.archives import Archive

    latest = Archive(args.archive).latest_run() if Path(args.archive).exists() else None
    common = ["--archive", args.archive, "--budget", str(args.budget), "--no-live"]
    # a stage may take an hour: a validation round of Seaquest is ~2,000 s on 2 busy cores (the
    # protocol's own since 51974da; given here too for runs started before it)
    common += ["--trainers", str(args.trainers), "--timeout", "3600"]
    common += ["--max-time", args.max_time] if args.max_time else []
    if latest is None:
        command = metarl("discover", "--protocol", PROTOCOL, "--rng-seed", str(args.rng_seed))
    else:
        command = metarl("discover", "--resume", latest["id"])
    started = time.monotonic()
    subprocess.run(command + common, check=False)
    print(f"search slice: {time.monotonic() - started:.0f} s")
    return Archive(args.archive).latest_run()["id"]


def programs(archive_path: str, run_id: str, candidate: str | None) -> dict[str, dict]:
    """The incumbent (or `candidate`) and the references, as the run's seed programs:
    name -> {id, name, code}."""
    from metarl.archives import Archive
    from metarl.archives.incumbents import run_incumbent

    archive = Archive(archive_path)
    incumbent = archive.candidate(candidate) if candidate else None
    if incumbent is None:
        found = run_incumbent(archive, run_id)
        if found is None:
            raise SystemExit(f"run {run_id} has no incumbent yet")
        incumbent = archive.candidate(found.id)
    rows = {row["name"]: row for row in archive.run_candidates(run_id) if row["is_seed"]}
    chosen = {name: rows[name] for name in REFERENCES}
    if incumbent["is_seed"]:  # no child held its races: the references are the whole table
        print(f"{incumbent['id']} is the seed program {incumbent['name']}")
    else:  # the run's incumbent, or the candidate asked for (say, the best by train score)
        chosen = {"candidate" if candidate else "incumbent": incumbent, **chosen}
    return {
        name: {"id": row["id"], "name": row["name"], "code": row["code"]}
        for name, row in chosen.items()
    }


def evaluate_batch(game: str, files: list[Path], seeds: int, steps: int) -> list:
    """One `metarl evaluate` batch of the programs on `game` alone; the outcomes' JSON."""
    command = metarl(
        "evaluate", *map(str, files), "--task", "drift", "--suite", SUITE,
        "--envs", game, "--seeds", str(seeds), "--timesteps", str(steps),
        "--skip-short", "--no-validation", "--timeout", "7200", "--json",
    )  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{game}: metarl evaluate failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def per_seed_scores(outcome: dict, game: str) -> dict:
    """A program's role, seeds, returns and per-seed normalised scores on `game` (full run)."""
    (score,) = [s for s in outcome["env_scores"] if s["env"] == game and s["stage"] == "full"]
    low, high = score["random_mean"], score["baseline_mean"]
    return {
        "role": score["role"],
        "seeds": score["seeds"],
        "returns": score["returns"],
        "normalised": [(r - low) / (high - low) for r in score["returns"]],
    }


def test(args, chosen: dict[str, dict]) -> dict:
    """Step 2: the programs on fresh seeds, one batch per test game."""
    folder = Path(tempfile.mkdtemp(prefix="at-scale-"))
    files = []
    for name, program in chosen.items():
        files.append(folder / f"{name}.py")
        files[-1].write_text(program["code"])
    started = time.monotonic()
    with ThreadPoolExecutor(len(TEST_GAMES)) as pool:
        batches = list(
            pool.map(
                lambda game: evaluate_batch(game, files, args.test_seeds, args.timesteps),
                TEST_GAMES,
            )
        )
    result = {"seconds": time.monotonic() - started, "timesteps": args.timesteps, "games": {}}
    for game, batch in zip(TEST_GAMES, batches):
        for name, outcome in zip(chosen, batch):
            if not outcome["passed"]:
                raise SystemExit(f"{name} stopped on {game}: {outcome['reason']}")
            result["games"].setdefault(game, {})[name] = per_seed_scores(outcome, game)
    return result


def summarise(result: dict, names) -> dict:
    """IQM with interval per program, and P(program > reference) with its interval and verdict
    for the incumbent (or candidate) against each reference and for LPO against PPO-clip."""
    from metarl.evaluation.statistics import iqm_interval, probability_of_improvement, verdict

    games = list(result["games"])
    matrix = {
        name: np.array([result["games"][g][name]["normalised"] for g in games]).T for name in names
    }
    summary = {"iqm": {name: list(iqm_interval(matrix[name])) for name in names}, "poi": {}}
    pairs = [
        (name, reference) for name in names if name not in REFERENCES for reference in REFERENCES
    ]
    pairs.append(REFERENCES)  # LPO against PPO-clip: what the best warm start is worth here
    for challenger, reference in pairs:
        estimate = probability_of_improvement(matrix[challenger], matrix[reference])
        summary["poi"][f"{challenger} vs {reference}"] = [*estimate, verdict(estimate)]
    return summary


def discogen(args, chosen: dict[str, dict]) -> dict:
    """Step 3: the incumbent (or candidate) and LPO in DiscoGen's harness, test side, the same
    budget (PPO-clip is DiscoGen's base, scored with every program)."""
    scores = {}
    for name in (n for n in chosen if n != "ppo_clip"):
        command = metarl(
            "evaluate", chosen[name]["id"], "--harness", "discogen", "--test", "--archive",
            args.archive, "--set", f"TOTAL_TIMESTEPS={args.timesteps}", "--timeout", "36000",
            "--json",
        )  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode not in (0, 1):
            raise SystemExit(f"DiscoGen's harness failed: {done.stderr.strip()[-2000:]}")
        scores[name] = json.loads(done.stdout)
    return scores


def print_tables(chosen, result, summary) -> None:
    seeds = len(next(iter(result["games"].values()))[REFERENCES[0]]["seeds"])
    where = f"{platform.node()}, {result['seconds']:.0f} s"
    budget = f"{result['timesteps']:.0e} steps"
    print(f"\nTest games, {seeds} fresh seeds per game, {budget} ({where}):\n")
    games = list(result["games"])
    columns = " | ".join(f"{g} mean return" for g in games)
    print(f"| program | id | {columns} | IQM, PPO-clip = 1 [95% CI] |")
    print("|---|---|" + "---:|" * len(games) + "---|")
    for name, program in chosen.items():
        means = [float(np.mean(result["games"][g][name]["returns"])) for g in games]
        cells = " | ".join(f"{m:.2f}" for m in means)
        iqm = "{:.2f} [{:.2f}, {:.2f}]".format(*summary["iqm"][name])
        label = program["name"] if program["name"] == name else f"{program['name']} ({name})"
        print(f"| {label} | {program['id']} | {cells} | {iqm} |")
    print("\n| comparison | P(improvement) [95% CI] | verdict |\n|---|---|---|")
    for pair, (point, low, high, word) in summary["poi"].items():
        print(f"| {pair} | {point:.2f} [{low:.2f}, {high:.2f}] | {word} |")


def number(value: float | None) -> str:
    """A score to 3 places, or "undefined" (a base return of 0)."""
    return "undefined" if value is None else f"{value:.3f}"


def print_harness(chosen, harness: dict) -> None:
    """DiscoGen's scores: return / its base's return per game (mean over its 8 seeds)."""
    print("\nDiscoGen's harness (test side, its 8 seeds x 10 rates, best rate):\n")
    print("| program | id | game | return (mean ± std) | base return | / base | fitness |")
    print("|---|---|---|---:|---:|---:|---:|")
    for name, outcome in harness.items():
        if not outcome["passed"]:
            print(f"| {name} | {chosen[name]['id']} | stopped: {outcome['reason']} | | | | |")
            continue
        for game in outcome["games"]:
            print(
                f"| {chosen[name]['name']} | {chosen[name]['id']} | {game['env']} | "
                f"{game['candidate']:.2f} ± {game['candidate_std']:.2f} | {game['base']:.2f} | "
                f"{number(game['normalised'])} | {number(outcome['fitness'])} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archive", default="at-scale.db")
    parser.add_argument("--budget", type=int, default=64, help="candidates over the whole run")
    parser.add_argument("--max-time", default=None, help="the run's total wall time, e.g. 2h")
    parser.add_argument("--trainers", type=int, default=2)
    parser.add_argument("--rng-seed", type=int, default=0)
    parser.add_argument("--test-seeds", type=int, default=16)
    parser.add_argument("--timesteps", type=int, default=TIMESTEPS, help="test budget per run")
    parser.add_argument("--candidate", help="re-measure this candidate, not the incumbent")
    parser.add_argument("--skip-search", action="store_true")
    parser.add_argument("--skip-test", action="store_true")
    parser.add_argument("--discogen", action="store_true", help="also DiscoGen's harness")
    args = parser.parse_args()

    from metarl.archives import Archive

    if args.skip_search:
        run_id = Archive(args.archive).latest_run()["id"]
    else:
        run_id = search(args)
    chosen = programs(args.archive, run_id, args.candidate)
    out = Path(f"{args.archive}.at_scale.json")
    record = json.loads(out.read_text()) if out.exists() else {}
    if args.skip_test and record.get("programs") and not args.candidate:
        chosen = record["programs"]  # the tables stay those of the programs the test measured
    record.update({"run": run_id, "programs": chosen, "machine": platform.node()})
    if not args.skip_test:
        record["test"] = test(args, chosen)
    if "test" in record:
        record["summary"] = summarise(record["test"], list(record["test"]["games"].values())[0])
    if args.discogen:
        record["discogen"] = discogen(args, chosen)
    out.write_text(json.dumps(record, indent=1))
    if "test" in record:
        print_tables(chosen, record["test"], record["summary"])
    if "discogen" in record:
        print_harness(chosen, record["discogen"])
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
