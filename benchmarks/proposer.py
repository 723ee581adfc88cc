"""Does the proposer learn from the archive? Proposals until the first child beats the seeds, with
and without the model bandit, evolving guidance and near-duplicate rejection (metarl issue 26).

    python benchmarks/proposer.py                       # 5 configurations x rng seeds 0 1 2
    python benchmarks/proposer.py --configs baseline,all --rng-seeds 0 --full

What is measured. Each run is a real `metarl discover --proposer llm` (`DiscoveryLoop` with
`make_proposer`, as the CLI builds them): task `drift`, suite `smoke`, two models behind
`--api-base`, `openai/careful` and `openai/sloppy`, served by the scripted OpenAI-compatible
server of this file (stdlib `http.server`, 127.0.0.1); every child goes through the sandboxed
cascade. Per run, from its archive: proposals (children by candidate seq, the first is 1) until
the first child whose training fitness is above the best seed's in the same run; a run whose
budget ends first is censored ("> budget"), not counted as the budget. A run stops after the
generation of its first such child (`StopAtFirstBeat`; `--full` spends every budget), so the
other counts are the cost of getting there: evaluations the cascade ran (not settled before it
as no program, a repeat or a code near-duplicate), those that reached training, near-duplicates
rejected (code + behaviour, the run's state), LLM calls (proposals and guidance notes), the
share of proposal calls that went to `careful`, wall seconds.

The scripted models (`careful`, `sloppy`) and their server are in scripted_models.py beside
this file, which says what each writes and why.

Configurations: `baseline` (equal fixed weights, no guidance, `code_novelty` and
`behaviour_novelty` 0; exact repeats are still re-asked and identical outputs still stopped
after the probes), `+bandit` (`model_choice` bandit), `+guidance` (`guidance_every` 1: a run
has at most 4 generations), `+novelty` (config.py's defaults, 0.995 and 1e-3), `all`. Training
seeds are pinned (`seed_values` [0]): a program scores the same in every configuration. No
confirmation races (the metric reads training scores), no held-out envs.

Why one archive per run, not one shared archive. In a shared archive a run reuses the verdict
of a program another configuration trained (`archives.reuse.archived_score`), and a reused
verdict is never compared with the run's own programs' outputs: a duplicate trained by an
earlier run would pass in a later one, and the counts and islands would depend on the order of
the runs. Each run gets a fresh copy of a template archive holding the seed programs'
evaluations only (so seeds are not trained again); children are trained in every run that
proposes them. The PPO baselines are cached on disk as usual, and XLA's compilation cache
makes a program compiled by an earlier run cheaper: wall seconds depend on run order.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from scripted_models import CAREFUL, SLOPPY, ScriptedModels, register_prices  # noqa: E402

from metarl.archives.store import Archive
from metarl.discovery.config import DiscoverConfig
from metarl.discovery.loop import DiscoveryLoop
from metarl.discovery.proposers import make_proposer
from metarl.platform import device_description

# -- the runs ----------------------------------------------------------------------------------

NOVELTY = {"code_novelty": 0.995, "behaviour_novelty": 1e-3}  # config.py's defaults
CONFIGS: dict[str, dict] = {
    "baseline": {},
    "+bandit": {"model_choice": "bandit"},
    "+guidance": {"guidance_every": 1},
    "+novelty": NOVELTY,
    "all": {"model_choice": "bandit", "guidance_every": 1, **NOVELTY},
}
OFF = {"model_choice": "weights", "guidance_every": 0, "code_novelty": 0, "behaviour_novelty": 0}


@dataclass(frozen=True)
class Setting:
    """What every run shares."""

    budget: int
    children: int
    timesteps: int
    seed_values: list[int]
    api_base: str
    full: bool = False  # spend the whole budget (else stop after the first beat's generation)


@dataclass(frozen=True)
class RunRow:
    """One run's numbers.

    Attributes:
        first: proposals until the first child beat the best seed (1-based), None: censored.
        target: the best seed's training fitness.
        best: the best child's training fitness (None: none passed).
        evaluated: children the cascade ran; trained: those that reached training.
        near_code, near_behaviour: near-duplicates rejected.
        calls: LLM calls; careful: the share of proposal calls to `careful`.
        seconds: wall time of the run.
    """

    config: str
    rng_seed: int
    children: int
    first: int | None
    target: float
    best: float | None
    evaluated: int
    trained: int
    near_code: int
    near_behaviour: int
    calls: int
    careful: float
    seconds: float


def discover_config(name: str, rng_seed: int, setting: Setting) -> DiscoverConfig:
    """The run's options: the shared setting, the features off, then `name`'s turned on."""
    base = DiscoverConfig(
        task="drift",
        suite="smoke",
        proposer="llm",
        models=[CAREFUL, SLOPPY],
        api_base=setting.api_base,
        budget=setting.budget,
        children=setting.children,
        timesteps=setting.timesteps,
        seed_values=list(setting.seed_values),
        confirm=False,
        heldout=False,
        skip_short=True,
        max_time=None,
        rng_seed=rng_seed,
        workers=1,
        llm_timeout=60.0,
    )
    return replace(base, **{**OFF, **CONFIGS[name]}).resolved()


def make_template(folder: Path, setting: Setting) -> Path:
    """An archive holding the seed programs' evaluations only (a run of budget 0)."""
    path = folder / "template.db"
    config = replace(discover_config("baseline", 0, setting), budget=0)
    with Archive(path) as archive:
        DiscoveryLoop(archive, config, make_proposer("llm", config)).run()
    return path


def first_beat(rows: list[dict]) -> tuple[int | None, float]:
    """(proposals until the first child beat the best seed, 1-based, or None; the best seed's
    training fitness), from a run's candidate rows in seq order."""
    seeds = [r["fitness"] for r in rows if r["is_seed"] and r["status"] == "passed"]
    target = max(f for f in seeds if f is not None)
    children = [r for r in rows if not r["is_seed"]]
    for i, r in enumerate(children, 1):
        if r["status"] == "passed" and r["fitness"] is not None and r["fitness"] > target:
            return i, target
    return None, target


class StopAtFirstBeat:
    """The loop's event hook that ends a run after the generation in which a child first beat
    the seeds: it lowers the run's budget to the children already planned, so the loop ends
    there as when its budget is spent ("finished"). Off (`full`), runs spend their budget."""

    def __init__(self, archive: Archive, full: bool):
        self.archive, self.full = archive, full
        self.loop: DiscoveryLoop | None = None

    def __call__(self, kind: str, data: dict) -> None:
        if kind != "generation" or self.full or self.loop is None:
            return
        if first_beat(self.archive.run_candidates(self.loop.run_id))[0] is not None:
            self.loop.config.budget = self.loop.state.planned


def measure(archive: Archive, run_id: str, loop: DiscoveryLoop) -> dict:
    """The run's counts, read from its archive (see RunRow)."""
    rows = archive.run_candidates(run_id)
    first, target = first_beat(rows)
    children = [r for r in rows if not r["is_seed"]]
    passed = [r["fitness"] for r in children if r["status"] == "passed"]
    passed = [f for f in passed if f is not None]
    settled = ("propose", "dedup")
    evaluated = [r for r in children if r["stage"] not in settled and not r["cached_from"]]
    trained = [r for r in evaluated if r["status"] == "passed" or r["stage"] in ("short", "full")]
    calls = archive.query("SELECT model, candidate_id FROM calls WHERE run_id = ?", (run_id,))
    proposing = [c for c in calls if c["candidate_id"]]
    share = sum(c["model"] == CAREFUL for c in proposing) / max(1, len(proposing))
    return {
        "children": len(children),
        "first": first,
        "target": target,
        "best": max(passed) if passed else None,
        "evaluated": len(evaluated),
        "trained": len(trained),
        "near_code": loop.state.near_duplicates_code,
        "near_behaviour": loop.state.near_duplicates_behaviour,
        "calls": len(calls),
        "careful": share,
    }


def run_one(
    name: str, rng_seed: int, setting: Setting, template: Path, folder: Path, server
) -> RunRow:
    """One discovery run of configuration `name` in a fresh copy of the template archive."""
    path = folder / f"{name.strip('+')}-{rng_seed}.db"
    shutil.copyfile(template, path)
    server.seed = rng_seed
    config = discover_config(name, rng_seed, setting)
    start = time.monotonic()
    with Archive(path) as archive:
        hook = StopAtFirstBeat(archive, setting.full)
        loop = DiscoveryLoop(archive, config, make_proposer("llm", config), on_event=hook)
        hook.loop = loop
        result = loop.run()
        seconds = time.monotonic() - start
        counts = measure(archive, result.run_id, loop)
    return RunRow(name, rng_seed, seconds=seconds, **counts)


# -- the tables --------------------------------------------------------------------------------


def first_text(row: RunRow, budget: int) -> str:
    return f"> {budget}" if row.first is None else str(row.first)


def mean_text(rows: list[RunRow], budget: int) -> str:
    """The mean; with censored runs counted as budget + 1, a lower bound (said)."""
    values = [r.first if r.first is not None else budget + 1 for r in rows]
    censored = sum(r.first is None for r in rows)
    mean = statistics.fmean(values)
    return f"{mean:.1f}" if not censored else f">= {mean:.1f} ({censored} censored)"


def tables(results: list[RunRow], configs: list[str], seeds: list[int], budget: int) -> str:
    """The summary table (one row per configuration) and the per-run table, as markdown."""
    out = [
        "| config | "
        + " | ".join(f"rng {s}" for s in seeds)
        + " | mean | evaluated | trained | near-dups rejected (code+behaviour) | LLM calls "
        "| careful share | wall s |",
        "|---|" + "---:|" * (len(seeds) + 7),
    ]
    for name in configs:
        rows = [r for r in results if r.config == name]
        if not rows:
            continue
        by_seed = {r.rng_seed: r for r in rows}
        firsts = [first_text(by_seed[s], budget) if s in by_seed else "-" for s in seeds]
        near = sum(r.near_code + r.near_behaviour for r in rows)
        code = sum(r.near_code for r in rows)
        out.append(
            f"| {name} | "
            + " | ".join(firsts)
            + f" | {mean_text(rows, budget)} | {sum(r.evaluated for r in rows)} "
            f"| {sum(r.trained for r in rows)} | {near} ({code}+{near - code}) "
            f"| {sum(r.calls for r in rows)} "
            f"| {100 * statistics.fmean(r.careful for r in rows):.0f}% "
            f"| {sum(r.seconds for r in rows):.0f} |"
        )
    out += [
        "",
        "| config | rng | first beat | children | seed target | best child | evaluated "
        "| trained | near code | near behaviour | LLM calls | careful share | wall s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        best = "—" if r.best is None else f"{r.best:.3f}"
        out.append(
            f"| {r.config} | {r.rng_seed} | {first_text(r, budget)} | {r.children} "
            f"| {r.target:.3f} | {best} "
            f"| {r.evaluated} | {r.trained} | {r.near_code} | {r.near_behaviour} | {r.calls} "
            f"| {100 * r.careful:.0f}% | {r.seconds:.0f} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--rng-seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=16, help="children per run")
    parser.add_argument("--children", type=int, default=4, help="children per generation")
    parser.add_argument("--timesteps", type=int, default=8192, help="per-environment budget")
    parser.add_argument("--seed-values", type=int, nargs="+", default=[0])
    parser.add_argument(
        "--full",
        action="store_true",
        help="spend every run's budget (default: stop each run "
        "after the generation in which a child first beats the seeds)",
    )
    parser.add_argument("--keep", type=Path, default=None, help="folder to keep the archives in")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configs {unknown}; choose from {list(CONFIGS)}")

    folder = args.keep or Path(tempfile.mkdtemp(prefix="metarl-proposer-"))
    folder.mkdir(parents=True, exist_ok=True)
    register_prices()
    server = ScriptedModels()
    setting = Setting(
        args.budget, args.children, args.timesteps, args.seed_values, server.start(), args.full
    )
    results: list[RunRow] = []
    start = time.monotonic()
    try:
        template = make_template(folder, setting)
        print(f"seeds evaluated into the template archive in {time.monotonic() - start:.0f} s")
        for rng_seed in args.rng_seeds:
            for name in configs:
                row = run_one(name, rng_seed, setting, template, folder, server)
                results.append(row)
                print(f"  {tables([row], [name], [rng_seed], args.budget).splitlines()[-1]}")
    finally:
        server.stop()
    print()
    print(
        f"machine: {platform.node()} ({os.cpu_count()} cores, {platform.machine()}) · "
        f"{device_description()} · python {platform.python_version()}"
    )
    print(
        f"setting: drift on smoke (CartPole-v1), {args.timesteps} steps, seed values "
        f"{args.seed_values}, budget {args.budget} children, {args.children} per generation, "
        f"no confirmation, no held-out envs; total {time.monotonic() - start:.0f} s"
    )
    print(f"scripted replies by kind: {dict(sorted(server.kinds.items()))}")
    print(f"archives: {folder}")
    print()
    print(tables(results, configs, args.rng_seeds, args.budget))
    return 0


if __name__ == "__main__":
    sys.exit(main())
