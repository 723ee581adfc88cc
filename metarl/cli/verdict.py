"""`metarl evaluate` on the terminal: the spinner naming each file's cascade stage, then each
file's scores, verdict, warnings, timings, and its captured output when it failed.

The failure reason, the warnings and the captured output are the candidate's own text: they
are printed as `console.untrusted` Text, never as markup, their escapes made visible.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from rich.table import Table
from rich.text import Text

from metarl.cli.console import cells, console, err_console, say, untrusted
from metarl.cli.formats import fmt_compact, fmt_interval, fmt_published, fmt_seconds
from metarl.evaluation.text import printable
from metarl.tasks import reference_names

STAGE_LABELS = {
    "static": "static check",
    "probes": "probes",
    "baseline": "baseline on the same seeds",
    "short": "short run",
    "full": "full run",
}
TIMING_KEYS = (
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
CAPTURED_LINES = 20  # of a failed candidate's output


class _Stages:
    """The spinner's text: each candidate's stage and how long it has been in it, re-read at
    every refresh (a clock that moves, even through a long baseline or full run)."""

    def __init__(self, names: list[str]):
        self.names = names
        now = time.monotonic()
        self.stages = [("starting the sandbox workers", now) for _ in names]

    def enter(self, index: int, stage: str) -> None:
        self.stages[index] = (STAGE_LABELS.get(stage, stage), time.monotonic())

    def __rich__(self) -> Text:
        now = time.monotonic()
        return untrusted(
            "; ".join(
                f"{name}: {label} {fmt_seconds(now - since)}"
                for name, (label, since) in zip(self.names, self.stages)
            )
        )


@contextmanager
def stage_spinner(names: list[str]) -> Iterator[Callable[[int, str], None]]:
    """A spinner on stderr naming each candidate's cascade stage, with a live clock.

    Args:
        names: the candidates' file names, in batch order.

    Yields:
        The `progress(index, stage)` callback of `Evaluator.evaluate_batch`.
    """
    stages = _Stages(names)
    with err_console.status(stages):
        yield stages.enter


def _scores_table(outcome, title: str) -> Table:
    table = Table(title=untrusted(title))
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
        name = score.env + {"validation": " (validation)", "test": " (test)"}.get(score.role, "")
        if score.lr is not None:  # a swept evaluation: one row per rate
            name += f" @ lr {score.lr:.3g}"
        table.add_row(
            *cells(
                name,
                score.stage,
                f"{score.total_timesteps:,}",
                f"{fmt_compact(score.mean, 1)} ± {fmt_compact(score.std, 1)}",
                fmt_interval(score.normalised, score.normalised_ci, number=fmt_compact),
                fmt_compact(score.compile_s, 1),
                fmt_compact(score.run_s, 1),
                f"{score.steps_per_s:,.0f}" if score.steps_per_s else "-",
            )
        )
    return table


def print_outcome(outcome, path: Path, task: str, settings) -> None:
    """`metarl evaluate`: per-environment scores, the verdict, warnings, timings, and the
    candidate's captured output when it failed.

    Args:
        outcome: the candidate's `Outcome`.
        path: its file; task: the task's name; settings: the `CascadeSettings` it ran with.
    """
    plural = "s" if settings.seeds != 1 else ""
    title = f"{path.name} · task {task} · suite {settings.suite} · {settings.seeds} seed{plural}"
    if outcome.env_scores:
        console.print(_scores_table(outcome, title))
        # a network task's reference is its own (LPG's actor-critic), not a seed program
        reference, short = reference_names(task)
        say(
            f"normalised = (return - random policy) / ({reference} - random policy), same seeds "
            "and budget; "
            + "; ".join(
                f"{s.env}{'' if s.lr is None else f' @ lr {s.lr:.3g}'}: "
                f"random {fmt_compact(s.random_mean, 1)}, "
                f"{short} {fmt_compact(s.baseline_mean, 1)}"
                for s in outcome.env_scores
                if s.stage == "full" or len(outcome.env_scores) == 1
            ),
            style="dim",
        )
        seeds = outcome.env_scores[0].seeds
        say(
            f"training seeds {','.join(map(str, seeds))} "
            + ("(pinned)" if outcome.seeds_pinned else "(drawn for this batch)")
            + f"; re-run on them with --seed-values {','.join(map(str, seeds))}",
            style="dim",
        )
        published = [s for s in outcome.env_scores if s.published]
        if published:
            say(
                "vs published PPO returns, (return - random) / (published - random): "
                + "; ".join(f"{s.env}: {fmt_published(s.published)}" for s in published),
                style="dim",
            )
    else:
        say(title)
    if outcome.passed:
        held = "".join(
            f", {label} {fmt_interval(value, interval, number=fmt_compact)}"
            for label, value, interval in (
                ("validation", outcome.validation, outcome.validation_ci),
                ("test", outcome.heldout, outcome.heldout_ci),
            )
            if value is not None
        )
        fitness = fmt_interval(outcome.fitness, outcome.fitness_ci, number=fmt_compact)
        console.print(
            Text.assemble(("PASSED", "bold green"), f" every stage: train {fitness}{held}")
        )
    else:
        console.print(
            Text.assemble(
                ("FAILED", "bold red"),
                " at stage ",
                (printable(outcome.stage), "bold"),
                f": {printable(outcome.reason)}",
            )
        )
    for warning in outcome.warnings:
        console.print(Text.assemble(("warning: ", "yellow"), printable(warning)))
    if outcome.fingerprint:
        say(f"fingerprint {outcome.fingerprint}", style="dim")
    timings = " · ".join(
        f"{k} {outcome.timings[k]:.1f}s" for k in TIMING_KEYS if k in outcome.timings
    )
    if timings:
        say(f"timings: {timings}", style="dim")
    if outcome.stdout.strip() and not outcome.passed:
        lines = outcome.stdout.strip().splitlines()
        say("captured output (truncated):", style="dim")
        say("\n".join(lines[:CAPTURED_LINES]) + ("\n..." if len(lines) > CAPTURED_LINES else ""))
