"""`metarl report`: a run's story, or several runs compared, as one self-contained HTML file."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from metarl.cli.console import say
from metarl.cli.errors import UserError
from metarl.cli.options import archive_option


def report(
    runs: Optional[List[str]] = typer.Argument(
        None, help="Runs to report (default: the latest run). Several runs are compared."
    ),
    all_runs: bool = typer.Option(
        False, "--all-runs", "--all", help="Compare every run (of --task/--suite when given)."
    ),
    task: Optional[str] = typer.Option(None, "--task", help="With --all-runs: only this task."),
    suite: Optional[str] = typer.Option(None, "--suite", help="With --all-runs: only this suite."),
    out: Optional[Path] = typer.Option(
        None,
        "--out",
        "-o",
        help="The HTML file to write (default: report-RUN.html, report-all.html).",
    ),
    top: Optional[int] = typer.Option(
        None, "--top", help="Top candidates whose curves and scores are drawn (default 5)."
    ),
    archive: str = archive_option(),
) -> None:
    """Write a run's report: one HTML file that opens offline (plots, tables, code).

    A run's report: its header (task, suite, budget, seeds, versions, device, wall time), fitness
    over evaluations with the incumbent, learning curves of the top candidates against the
    baseline with the seed spread, per-environment scores with 95% intervals, the cascade's
    funnel and commonest failure reasons, the lineage of the best, LLM tokens/cost/latency, an
    ES run's fitness and sigma per generation, a GRPO run's reward and pass rates per step, and
    the top candidates' code with a diff against their parent. Several runs: a comparison
    first (one leaderboard, sample-efficiency curves, rows that are not comparable marked).

    Examples:

      metarl report

      metarl report r3 --out r3.html

      metarl report r1 r2 r4

      metarl report --all-runs --task drift --suite smoke -o drift.html
    """
    # lazy: the report imports plotly and the archive; `metarl --help` stays fast
    from metarl.archives.report_rows import run_ids
    from metarl.archives.store import Archive
    from metarl.report.page import default_path, write_report
    from metarl.report.settings import ReportSettings

    if runs and all_runs:
        raise UserError("give runs or --all-runs, not both")
    if (task or suite) and not all_runs:
        raise UserError("--task and --suite choose runs for --all-runs; give --all-runs too")
    settings = ReportSettings() if top is None else ReportSettings(top=top)
    with Archive(archive, must_exist=True) as store:
        if all_runs:
            chosen = run_ids(store, task=task, suite=suite)
        elif runs:
            chosen = list(dict.fromkeys(runs))
        else:
            latest = store.latest_run()
            chosen = [latest["id"]] if latest else []
        if not chosen:
            what = " matching those filters" if task or suite else ""
            raise UserError(f"no runs{what} in {archive}")
        path = out if out is not None else default_path(chosen, all_runs)
        written = write_report(store, chosen, path, settings)
    say(
        f"wrote {written.path} ({written.bytes / 1e6:.1f} MB, {len(written.runs)} "
        f"run{'s' if len(written.runs) > 1 else ''}, {written.seconds:.1f} s); open it in a browser"
    )
