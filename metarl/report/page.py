"""`metarl report`: one self-contained HTML file telling a run's story, or comparing runs.

The file opens offline, anywhere: plotly.js, the styles and the highlighted code are inside it
(no CDN, no server). The page is a Jinja2 template (templates/report.html.j2) filled with the
stories of `metarl.report.story` and the figures of `metarl.report.figures`; every number in a
table is the archive's, and every plot is drawn from the same data. Each section is a
`<section data-section=NAME data-run=RUN>`, which the tests and the screenshot script address.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import plotly.io as pio
import plotly.offline
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer, PythonLexer

from metarl import __version__
from metarl.archives.store import Archive
from metarl.report import adaptation, curriculum, figures, models
from metarl.report.comparison import Comparison, compare_runs
from metarl.report.guidance import GuidanceRow, guidance_of
from metarl.report.harnesses import HarnessSection, harnesses_of
from metarl.report.settings import ReportError, ReportSettings
from metarl.report.story import RunStory, run_story

TEMPLATES = Path(__file__).with_name("templates")
CODE_STYLE = "friendly"


@dataclass
class ReportFile:
    path: Path
    bytes: int
    runs: list[str]
    seconds: float


def fmt(value, digits: int = 3) -> str:
    """A number for a table cell; "—" when unknown."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def fmt_ci(value, interval, digits: int = 3) -> str:
    """ "0.953 [0.81, 1.10]", or the value alone without an interval."""
    if value is None:
        return "—"
    if not interval:
        return fmt(value, digits)
    return f"{value:.{digits}f} [{interval[0]:.2f}, {interval[1]:.2f}]"


def _figure(fig, div_id: str) -> Markup:
    return Markup(
        pio.to_html(
            fig,
            full_html=False,
            include_plotlyjs=False,
            div_id=div_id,
            config={"displaylogo": False, "responsive": True},
        )
    )


def _code(text: str, diff: bool = False) -> Markup:
    lexer = DiffLexer() if diff else PythonLexer()
    return Markup(highlight(text, lexer, HtmlFormatter(cssclass="code", nowrap=False)))


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(fmt=fmt, fmt_ci=fmt_ci, code=_code)
    environment.globals.update(score_label=curriculum.score_label)
    return environment


def run_figures(story: RunStory, settings: ReportSettings) -> dict:
    """The run's figures as HTML fragments, by section.

    Args:
        story: the run's story.
        settings: how many points a scatter draws at most.

    Returns:
        Section name -> figure; with `drawn` (fitness points drawn), when the run has a
        candidate with a test score `gap_drawn` (train-vs-test points drawn), with a
        curriculum `curriculum_drawn` (generations drawn), and with adaptation curves
        `adaptation_drawn` (environments drawn); with several LLMs `models`.
    """
    prefix = story.header.id
    fitness, drawn = figures.fitness_over_evaluations(story, settings.max_points)
    out = {"fitness": _figure(fitness, f"{prefix}-fitness-plot"), "drawn": drawn}
    gap = story.generalisation
    if gap is not None and gap.points:
        plot, out["gap_drawn"] = figures.generalisation_gap([gap], settings.max_points)
        out["generalisation"] = _figure(plot, f"{prefix}-generalisation-plot")
    if story.curves:
        out["curves"] = _figure(figures.learning_curves(story.curves), f"{prefix}-curves-plot")
        out["scores"] = _figure(figures.environment_scores(story.curves), f"{prefix}-scores-plot")
    if story.funnel.total:
        out["funnel"] = _figure(figures.funnel(story.funnel), f"{prefix}-funnel-plot")
    if story.usage:
        usage = [_sampled_usage(u, settings.max_points) for u in story.usage]
        out["llm"] = _figure(figures.llm_usage(usage), f"{prefix}-llm-plot")
    if story.es_history:
        out["es"] = _figure(figures.es_generations(story.es_history), f"{prefix}-es-plot")
    if story.curriculum:
        plot, out["curriculum_drawn"] = curriculum.curriculum_buffer(
            story.curriculum, story.header.config.get("curriculum"), settings.max_points
        )
        out["curriculum"] = _figure(plot, f"{prefix}-curriculum-plot")
    if story.adaptation:
        plot, out["adaptation_drawn"] = adaptation.adaptation_figure(story.adaptation)
        out["adaptation"] = _figure(plot, f"{prefix}-adaptation-plot")
    if story.models is not None:
        out["models"] = _figure(models.models_figure(story.models), f"{prefix}-models-plot")
    if story.grpo_steps:
        out["grpo"] = _figure(figures.grpo_steps(story.grpo_steps), f"{prefix}-grpo-plot")
    return out


def _sampled_usage(usage, limit: int):
    """The usage series thinned to about `limit` calls (totals untouched)."""
    if len(usage.minutes) <= limit:
        return usage
    stride = -(-len(usage.minutes) // limit)
    return dataclasses.replace(
        usage,
        minutes=usage.minutes[::stride],
        tokens=usage.tokens[::stride],
        latency_s=usage.latency_s[::stride],
        cumulative_cost=usage.cumulative_cost[::stride],
    )


def render(
    stories: list[RunStory],
    comparison: Comparison | None,
    settings: ReportSettings,
    archive_path: str,
    omitted: list[str],
    guidance: dict[str, list[GuidanceRow]] | None = None,
    harnesses: dict[str, HarnessSection | None] | None = None,
) -> str:
    """The page as one HTML string.

    Args:
        stories: the runs drawn in full.
        comparison: the comparison of several runs, or None for a single run.
        settings: what the sections show.
        archive_path: the archive the numbers come from (shown in the header).
        omitted: runs compared but not drawn in full (beyond `settings.max_stories`).
        guidance: run id -> its guidance section's rows (report/guidance.py); none: no section.
        harnesses: run id -> its candidates in other harnesses (report/harnesses.py); none: no
            section.
    """
    template = _environment().get_template("report.html.j2")
    guidance = guidance or {}
    harnesses = harnesses or {}
    runs = [
        {
            "story": s,
            "figures": run_figures(s, settings),
            "guidance": guidance.get(s.header.id, []),
            "harnesses": harnesses.get(s.header.id),
        }
        for s in stories
    ]
    compare = None
    if comparison is not None:
        compare = {
            "data": comparison,
            "plot": _figure(figures.comparison_curves(comparison), "compare-plot"),
        }
        if any(gap.points for gap in comparison.generalisation):
            plot, compare["gap_drawn"] = figures.generalisation_gap(
                comparison.generalisation, settings.max_points
            )
            compare["generalisation"] = _figure(plot, "compare-generalisation-plot")
    return template.render(
        title=_title(stories, comparison),
        plotly_js=Markup(plotly.offline.get_plotlyjs()),
        code_css=Markup(HtmlFormatter(style=CODE_STYLE).get_style_defs(".code")),
        runs=runs,
        compare=compare,
        settings=settings,
        omitted=omitted,
        archive=archive_path,
        protocols=protocols_of(stories, comparison),
        made=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        version=__version__,
    )


def protocols_of(stories: list[RunStory], comparison: Comparison | None) -> list[str]:
    """The evaluation protocols of the runs on the page, each once, in order of appearance.

    Args:
        stories: the runs drawn in full.
        comparison: the runs compared, or None.

    Returns:
        The protocol labels ("unrecorded" for runs archived before protocols were).
    """
    labels = [run.protocol for run in comparison.runs] if comparison is not None else []
    labels += [story.header.protocol for story in stories]
    return list(dict.fromkeys(labels))


def _title(stories: list[RunStory], comparison: Comparison | None) -> str:
    if comparison is not None:
        ids = [r.run_id for r in comparison.runs]
        shown = ", ".join(ids[:6]) + (f" and {len(ids) - 6} more" if len(ids) > 6 else "")
        return f"metarl: runs {shown} compared"
    header = stories[0].header
    return f"metarl: run {header.id} ({header.method}, {header.task} on {header.suite})"


def default_path(run_ids: list[str], all_runs: bool) -> Path:
    """report-r1.html, report-r1-r3.html, report-all.html: in the working directory."""
    if all_runs:
        return Path("report-all.html")
    name = "-".join(run_ids) if len(run_ids) <= 4 else f"{run_ids[0]}-to-{run_ids[-1]}"
    return Path(f"report-{name}.html")


def write_report(
    archive: Archive,
    run_ids: list[str],
    out: Path,
    settings: ReportSettings | None = None,
) -> ReportFile:
    """Write the report of `run_ids` (one run: its story; several: their comparison, then the
    first `settings.max_stories` stories) to `out`, atomically.

    Args:
        archive: the archive the runs are in.
        run_ids: the runs, in the order shown.
        out: the HTML file to write; its folder must exist.
        settings: what the sections show (ReportSettings() by default).

    Returns:
        The written file's path, size, runs and the seconds it took.

    Raises:
        ArchiveError: an unknown run.
        ReportError: no runs, or a file that cannot be written.
    """
    settings = settings or ReportSettings()
    if not run_ids:
        raise ReportError(
            f"no runs to report in {archive.path}",
            hint="start one with `metarl discover`, or widen the --task and --suite filters",
        )
    start = datetime.now(timezone.utc)
    for run_id in run_ids:
        archive.get_run(run_id)  # an unknown run is one clear line before any work
    comparison = (
        compare_runs(archive, run_ids, limit=max(20, settings.top)) if len(run_ids) > 1 else None
    )
    shown = run_ids[: settings.max_stories] if comparison is not None else run_ids
    stories = [
        models.with_models(
            archive, adaptation.with_adaptation(archive, run_story(archive, run_id, settings))
        )
        for run_id in shown
    ]
    guidance = {run_id: guidance_of(archive, run_id) for run_id in shown}
    harnesses = {run_id: harnesses_of(archive, run_id) for run_id in shown}
    omitted = run_ids[len(shown) :]
    text = render(stories, comparison, settings, str(archive.path), omitted, guidance, harnesses)
    _write_atomically(out, text)
    seconds = (datetime.now(timezone.utc) - start).total_seconds()
    return ReportFile(path=out, bytes=len(text.encode()), runs=run_ids, seconds=seconds)


def _write_atomically(out: Path, text: str) -> None:
    """Write `text` to `out` through a temporary file in the same folder (a reader never sees
    half a report; an existing report is replaced only by a whole new one)."""
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise ReportError(
            f"cannot write {out}: folder {folder} does not exist",
            hint="create the folder, or pass --out with a path in an existing one",
        )
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(prefix=".report-", suffix=".html", dir=folder)
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.chmod(temporary, 0o644)  # mkstemp's file is private; a report is for sharing
        os.replace(temporary, out)
    except OSError as error:
        if temporary is not None and os.path.exists(temporary):
            os.unlink(temporary)
        raise ReportError(f"cannot write {out}: {error.strerror or error}") from None
