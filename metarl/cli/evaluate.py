"""`metarl evaluate`: run the whole evaluation cascade on one candidate file."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import typer

from metarl.evaluation.settings import CascadeSettings

DEFAULTS = CascadeSettings()

EXAMPLES = """
Examples:

  metarl evaluate metarl/tasks/drift/seed_programs/lpo.py --task drift --suite smoke

  metarl evaluate my_drift.py --task drift --suite classic --seeds 8

  metarl evaluate my_rule.py --task optimizer --json > outcome.json

Exit status: 0 when the candidate passed every stage, 1 when it stopped at a stage (the reason
is printed, and is in the JSON), 2 on a usage error.
"""


def _fail_usage(message: str) -> None:
    typer.echo(f"metarl evaluate: error: {message}", err=True)
    raise typer.Exit(2)


def _fmt(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}g}" if abs(value) >= 1000 else f"{value:.{digits}f}"


def evaluate(
    path: Path = typer.Argument(..., help="Python file defining the task's function."),
    task: str = typer.Option(
        ..., "--task", "-t", help="Which contract the file implements: drift or optimizer."
    ),
    suite: str = typer.Option(
        DEFAULTS.suite, "--suite", "-s", help="Environment suite: smoke, classic or minatar."
    ),
    seeds: Optional[int] = typer.Option(
        None, "--seeds", help="Number of seeds (0..N-1); default: the suite's."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print the outcome as one JSON object on stdout."
    ),
    timesteps: Optional[int] = typer.Option(
        None, "--timesteps", help="Override the per-env training budget."
    ),
    short_timesteps: Optional[int] = typer.Option(
        None, "--short-timesteps", help="Override the short-run budget."
    ),
    threshold: float = typer.Option(
        DEFAULTS.short_run_threshold,
        "--short-threshold",
        help="Stop after the short run below this normalised score.",
    ),
    skip_short: bool = typer.Option(False, "--skip-short", help="Go straight to the full run."),
    heldout: bool = typer.Option(True, "--heldout/--no-heldout", help="Also score held-out envs."),
    timeout: float = typer.Option(
        DEFAULTS.timeout_s, "--timeout", help="Wall-clock limit (s) for stages 2-4."
    ),
    memory_mb: int = typer.Option(
        DEFAULTS.memory_mb, "--memory-mb", help="Memory limit of the sandbox worker."
    ),
    probe_seed: Optional[int] = typer.Option(
        None, "--probe-seed", help="Fix the probes' random inputs."
    ),
    unsafe_no_sandbox: bool = typer.Option(
        False,
        "--unsafe-no-sandbox",
        help="Run the candidate WITHOUT bubblewrap (it can then read this machine's files "
        "and keys).",
    ),
) -> None:
    """Run the evaluation cascade (static, probes, short run, full run) on a candidate file
    and print where it stopped and why, with per-environment scores."""
    # lazy: keeps `metarl --help` and the archive commands fast (no jax import)
    from metarl.rl.suites import get_suite, suite_names
    from metarl.tasks import task_names

    if task not in task_names():
        _fail_usage(f"unknown task {task!r}; choose one of: {', '.join(task_names())}")
    if suite not in suite_names():
        _fail_usage(f"unknown suite {suite!r}; choose one of: {', '.join(suite_names())}")
    if not path.exists():
        _fail_usage(f"no such file: {path}")
    if not path.is_file():
        _fail_usage(f"not a file: {path}")
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        _fail_usage(f"cannot read {path}: {error}")
    for name, value in (
        ("--seeds", seeds),
        ("--timesteps", timesteps),
        ("--short-timesteps", short_timesteps),
    ):
        if value is not None and value < 1:
            _fail_usage(f"{name} must be at least 1")
    if timeout <= 0 or memory_mb <= 0:
        _fail_usage("--timeout and --memory-mb must be positive")

    from rich.console import Console

    # lazy: keeps `metarl --help` and the archive commands fast (no jax import)
    from metarl.evaluation.cascade import CascadeSettings, Evaluator

    settings = CascadeSettings(
        suite=suite,
        seeds=seeds or get_suite(suite).default_seeds,
        short_run_threshold=threshold,
        total_timesteps=timesteps,
        short_timesteps=short_timesteps,
        timeout_s=timeout,
        memory_mb=memory_mb,
        heldout=heldout,
        skip_short=skip_short,
        probe_seed=probe_seed,
        unsafe_no_sandbox=unsafe_no_sandbox,
    )
    # lazy: keeps `metarl --help` and the archive commands fast (no jax import)
    from metarl.evaluation.sandbox import SandboxUnavailable

    err = Console(stderr=True)
    labels = {
        "static": "static check",
        "probes": "probes",
        "short": "short run",
        "full": "full run",
    }
    try:
        evaluator = Evaluator(settings, workers=1, prewarm=False)
    except SandboxUnavailable as error:
        err.print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True, markup=True)
        raise typer.Exit(2) from None
    with evaluator:
        if as_json:
            outcome = evaluator.evaluate(source, task)
        else:
            with err.status(f"{path.name}: starting the sandbox worker") as status:
                outcome = evaluator.evaluate(
                    source,
                    task,
                    progress=lambda stage: status.update(
                        f"{path.name}: {labels.get(stage, stage)}"
                    ),
                )

    if as_json:
        typer.echo(json.dumps(outcome.to_dict()))
    else:
        _print_outcome(outcome, path, task, settings)
    raise typer.Exit(0 if outcome.passed else 1)


def _print_outcome(outcome, path: Path, task: str, settings) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    if not console.is_terminal:  # piped or captured: don't squeeze the table into 80 columns
        console = Console(width=max(console.width, 132))
    plural = "s" if settings.seeds != 1 else ""
    title = f"{path.name} · task {task} · suite {settings.suite} · {settings.seeds} seed{plural}"
    if outcome.env_scores:
        table = Table(title=title)
        for column, justify in (
            ("env", "left"),
            ("stage", "left"),
            ("steps", "right"),
            ("return", "right"),
            ("normalised", "right"),
            ("compile s", "right"),
            ("run s", "right"),
            ("env-steps/s", "right"),
        ):
            table.add_column(column, justify=justify, overflow="fold")
        for score in outcome.env_scores:
            name = score.env + (" (held-out)" if score.heldout else "")
            table.add_row(
                name,
                score.stage,
                f"{score.total_timesteps:,}",
                f"{_fmt(score.mean, 1)} ± {_fmt(score.std, 1)}",
                _fmt(score.normalised),
                _fmt(score.compile_s, 1),
                _fmt(score.run_s, 1),
                f"{score.steps_per_s:,.0f}" if score.steps_per_s else "-",
            )
        console.print(table)
        console.print(
            "normalised = (return - random policy) / (baseline seed - random policy), same seeds "
            "and budget; "
            + "; ".join(
                f"{s.env}: random {_fmt(s.random_mean, 1)}, baseline {_fmt(s.baseline_mean, 1)}"
                for s in outcome.env_scores
                if s.stage == "full" or len(outcome.env_scores) == 1
            ),
            style="dim",
            highlight=False,
        )
    else:
        console.print(title)
    if outcome.passed:
        held = f", held-out {_fmt(outcome.heldout)}" if outcome.heldout is not None else ""
        console.print(f"[bold green]PASSED[/] every stage: fitness {_fmt(outcome.fitness)}{held}")
    else:
        console.print(
            Text.assemble(
                ("FAILED", "bold red"), " at stage ", (outcome.stage, "bold"), f": {outcome.reason}"
            )
        )
    for warning in outcome.warnings:
        console.print(Text.assemble(("warning: ", "yellow"), warning))
    if outcome.fingerprint:
        console.print(f"fingerprint {outcome.fingerprint}", style="dim")
    keys = (
        "static",
        "wait_worker",
        "probes",
        "short",
        "full",
        "compile",
        "run",
        "baseline",
        "teardown",
        "total",
    )
    timings = " · ".join(f"{k} {outcome.timings[k]:.1f}s" for k in keys if k in outcome.timings)
    if timings:
        console.print(f"timings: {timings}", style="dim")
    if outcome.stdout.strip() and not outcome.passed:
        lines = outcome.stdout.strip().splitlines()
        console.print("captured output (truncated):", style="dim")
        console.print(
            "\n".join(lines[:20]) + ("\n..." if len(lines) > 20 else ""),
            markup=False,
            highlight=False,
        )


def register(app: typer.Typer) -> None:
    app.command("evaluate", help=(evaluate.__doc__ or "") + "\n\n" + EXAMPLES)(evaluate)
