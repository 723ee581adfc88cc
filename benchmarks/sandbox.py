"""Sandbox overhead per candidate, next to the training time it wraps.

    python benchmarks/sandbox.py             # CartPole 5e5, Breakout (CPU: 1e6), classic suite
    python benchmarks/sandbox.py --quick            # tiny budgets: a sanity check in ~1-2 minutes
    python benchmarks/sandbox.py --scenarios cartpole classic --seeds 4
    python benchmarks/sandbox.py --breakout-timesteps 10000000   # the real MinAtar budget (GPU)
    python benchmarks/sandbox.py --quick --before b8916a5   # the same scenarios on an older commit

`--before REF` checks REF out into a temporary git worktree and runs that commit's own copy of
this benchmark (its code on PYTHONPATH, its own cache directory) right after this one, with the
same arguments, and prints both tables: the machine is shared and noisy, so compare rows from
one invocation only. Columns the older commit does not have are shown as `-`.

Each scenario evaluates the drift task's PPO-clip seed through the real cascade (static check,
sandboxed worker, probes, training) with baselines and random returns cached beforehand, so
the numbers are what one candidate costs in a discovery run. The worker is pre-warmed (as in
the loop, where the LLM's latency hides the import); the cold import is reported separately.

Columns (seconds): `import` is the worker's start-up (python + jax + XLA init; hidden when
pre-warmed), `preload` the rest of the training stack imported while idle (gymnax, flax...),
`wait` what the caller actually waited for a worker, `hand-off` job and result transfer,
`teardown` the kill of the process group and temp-dir removal, `trace+export` the sandboxed
tracer (the candidate's Python, its probes, jax.export, hand-off), `verify` the trainer's
deserialisation and verification of the artifact, `probes+load` the probe stage,
`compile` XLA compilation of the training programs (the pre-flight at the training shapes
included), `train` the runs themselves, `other` the rest inside the worker (baseline/random
lookups, lazy imports), `checks` the integrity checks added for the second integrity round
(artifact pre-check in a fresh worker, behaviour checks at the training sizes; part of the
columns before it). Two ratios:
- sandbox % = (wait + hand-off + teardown) / total: what process isolation costs;
- fixed % = (total - train) / total: everything that is not training (compile included).
Target (issue): fixed cost <= 20% of a classic-suite evaluation. Paste the table into
benchmarks/RESULTS.md with the machine's name.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from worktree import run_at_commit

SCENARIOS = {
    # name: (suite, envs, skip_short, heldout)
    "cartpole": ("classic", ["CartPole-v1"], True, False),
    "breakout": ("minatar", ["Breakout-MinAtar"], True, False),
    "classic": ("classic", None, False, True),
}


def _device() -> str:
    import jax

    device = jax.devices()[0]
    kind = getattr(device, "device_kind", "") or device.platform
    python = platform.python_version()
    cores = os.cpu_count()
    return f"{platform.node()} · {device.platform} {kind} · {cores} cores · python {python}"


def measure(name: str, timesteps: dict, seeds: int, repeats: int) -> list[dict]:
    from metarl.evaluation.cascade import CascadeSettings, Evaluator
    from metarl.tasks import get_task

    suite, envs, skip_short, heldout = SCENARIOS[name]
    settings = CascadeSettings(
        suite=suite,
        seeds=seeds,
        total_timesteps=timesteps.get(name),
        skip_short=skip_short,
        heldout=heldout,
        envs=envs,
        timeout_s=3600,
        probe_seed=0,
        # pinned, so the baselines trained before the repeats are the ones every repeat uses
        # (drawn seeds would train a new baseline inside the measured evaluation)
        seed_values=list(range(seeds)),
        short_timesteps=timesteps.get(f"{name}_short"),
    )
    source = get_task("drift").seed_program("ppo_clip").source
    rows = []
    with Evaluator(settings, workers=1) as evaluator:
        start = time.perf_counter()
        evaluator.baseline("drift")  # train or load the baselines first: not part of a candidate
        if not skip_short:
            evaluator.evaluate(source, "drift")  # also caches the short-run baseline
        warmup = time.perf_counter() - start
        for repeat in range(repeats):
            for pool in (evaluator._executor.pool("tracer"), evaluator._executor.pool("trainer")):
                pool._idle[0].wait_ready()
            time.sleep(6.0)  # let the spare finish preloading, as it would during an LLM call
            outcome = evaluator.evaluate(source, "drift")
            if not outcome.passed:
                raise SystemExit(
                    f"{name}: the seed did not pass: {outcome.stage}: {outcome.reason}"
                )
            t = outcome.timings
            compile_s = sum(s.compile_s for s in outcome.env_scores)
            train_s = sum(s.run_s for s in outcome.env_scores)
            # the trainer's round trip minus its own work (the tracer's round trip is `trace`)
            trainer_s = t.get("sandbox", 0.0) - t.get("trace", 0.0)
            handoff = max(0.0, trainer_s - t.get("worker_job", trainer_s))
            other = t.get("worker_job", 0.0) - t.get("probes", 0.0) - compile_s - train_s
            # the integrity checks of the parent and the trainer: the artifact pre-check (a
            # fresh worker), the behaviour checks at the training sizes (in probes+load); the
            # pre-flight at the training shapes is inside compile
            checks = t.get("precheck", 0.0) + t.get("behaviour", 0.0)
            total = t["total"]
            rows.append(
                dict(
                    scenario=name,
                    repeat=repeat,
                    envs=[s.env for s in outcome.env_scores],
                    steps=[s.total_timesteps for s in outcome.env_scores],
                    seeds=seeds,
                    import_s=t.get("import", 0.0),
                    preload_s=t.get("preload", 0.0),
                    wait_s=t.get("wait_worker", 0.0),
                    handoff_s=handoff,
                    teardown_s=t.get("teardown", 0.0),
                    trace_s=t.get("trace", 0.0),
                    verify_s=t.get("load_artifact", 0.0),
                    probes_s=t.get("probes", 0.0),
                    compile_s=compile_s,
                    train_s=train_s,
                    other_s=other,
                    checks_s=checks,
                    total_s=total,
                    warmup_s=warmup,
                    sandbox_pct=100
                    * (t.get("wait_worker", 0.0) + handoff + t.get("teardown", 0.0))
                    / total,
                    fixed_pct=100 * (total - train_s) / total,
                    network=outcome.sandbox.get("network"),
                )
            )
    return rows


def measure_commit(ref: str, argv: list[str]) -> list[dict]:
    """Run `ref`'s own benchmarks/sandbox.py with `argv` in a temporary worktree; its JSON rows."""
    out = run_at_commit(ref, "benchmarks/sandbox.py", [*argv, "--json"])
    rows = json.loads(out[out.index("\n[") + 1 :])
    for row in rows:
        row["scenario"] = f"{row['scenario']} @ {ref}"
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--cartpole-timesteps", type=int, default=500_000)
    parser.add_argument(
        "--breakout-timesteps", type=int, default=None, help="default: 1e7 on a GPU, 1e6 on a CPU"
    )
    parser.add_argument(
        "--classic-timesteps", type=int, default=None, help="default: the suite's 5e5"
    )
    parser.add_argument("--quick", action="store_true", help="tiny budgets, 1 seed: a sanity check")
    parser.add_argument("--json", action="store_true", help="also print the raw rows as JSON")
    parser.add_argument(
        "--before", metavar="REF", help="also run REF's copy of this benchmark (git worktree)"
    )
    args = parser.parse_args()

    import jax
    from rich.console import Console
    from rich.table import Table

    import metarl  # noqa: F401 - XLA flags before jax

    gpu = jax.default_backend() != "cpu"
    timesteps = {
        "cartpole": args.cartpole_timesteps,
        "breakout": args.breakout_timesteps or (10_000_000 if gpu else 1_000_000),
        "classic": args.classic_timesteps,
    }
    seeds = args.seeds
    if args.quick:
        timesteps = {"cartpole": 8192, "breakout": 16384, "classic": 8192, "classic_short": 4096}
        seeds = 1

    rows = []
    for name in args.scenarios:
        rows.extend(measure(name, timesteps, seeds, args.repeats))
    if args.before:
        argv = [a for a in sys.argv[1:] if a not in ("--json", "--before", args.before)]
        rows.extend(measure_commit(args.before, argv))

    table = Table(title=f"sandbox overhead per candidate · {_device()}")
    for column in (
        "scenario",
        "steps x seeds",
        "import",
        "preload",
        "wait",
        "hand-off",
        "teardown",
        "trace+export",
        "verify",
        "probes+load",
        "compile",
        "train",
        "other",
        "checks",
        "total",
        "sandbox %",
        "fixed %",
    ):
        table.add_column(column, justify="left" if column == "scenario" else "right")
    for row in rows:
        budget = " + ".join(f"{s:.0e}".replace("e+0", "e") for s in row["steps"])
        table.add_row(
            row["scenario"],
            f"{budget} x {row['seeds']}",
            *(
                f"{row[k]:.2f}" if k in row else "-"
                for k in (
                    "import_s",
                    "preload_s",
                    "wait_s",
                    "handoff_s",
                    "teardown_s",
                    "trace_s",
                    "verify_s",
                    "probes_s",
                    "compile_s",
                    "train_s",
                    "other_s",
                    "checks_s",
                    "total_s",
                )
            ),
            f"{row['sandbox_pct']:.1f}",
            f"{row['fixed_pct']:.1f}",
        )
    console = Console(width=180)
    console.print(table)
    console.print(
        "import/preload happen before the candidate arrives (pre-warmed worker) and are not in "
        "total; wait is what the caller saw. Network isolation: "
        + ", ".join(sorted({str(r["network"]) for r in rows})),
        style="dim",
    )
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
