"""The adaptation plot: does a meta-RL run's learner adapt on held-out tasks?

A meta-RL learner's final return alone cannot say whether it adapts: an RL² agent that scores
well on its first episode and never improves within a trial, or a MAML initialisation that is
good before any inner step and gains nothing from them, is no meta-learner. So a meta-RL run's
evaluations store an adaptation curve (`EnvScore.adaptation`: RL², the mean return at each
episode of a trial; MAML, after 0..K inner gradient steps), and this section draws it on every
environment of the validation and test roles (the held-out tasks), beside a table of its values.

Beside it each evaluation stores `EnvScore.scratch`: PPO trained from scratch with the same
experience on the same held-out tasks (rl/scratch.py), at the same points. It does not depend on
the candidate, so it is the paired reference that says whether a climbing curve is
meta-learning or just learning: a learner that adapts climbs faster than PPO from scratch. Each
panel draws the incumbent's evaluation's scratch curve dotted (SCRATCH_LABEL), and the table
lists it in a row under the incumbent's; an evaluation from before it was recorded has none.

Whose curves: the run's incumbent (its recorded best, else the last best score so far) and the
baseline program's, the same program evaluated at the top candidates' setting that the learning
curves draw dashed (`story._baseline_id`). The baseline's curve is never stored with the
candidate's own scores (an EnvScore keeps only the baseline's mean return), so it is drawn when
the baseline program's own evaluations in the archive carry one, and left out otherwise. For each
candidate and environment the curve is the last one written (a test role re-measured on fresh
seeds after selection supersedes the one measured with the candidate).

Plain data (`AdaptationCurve`) is read from the archive here, not in story.py (the figures this
module draws with import story.py, so story.py cannot import this module); `page.write_report`
attaches it to each story (`with_adaptation`). A run whose incumbent has no adaptation curve
(PPO, every run from before it was recorded) has no such section.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from metarl.archives.store import Archive
from metarl.report.figures import BASELINE_COLOUR, PALETTE, _layout
from metarl.report.story import RunStory

logger = logging.getLogger(__name__)

# the held-out roles whose tasks an adaptation curve is measured on
ROLES = ("validation", "test")
# what the x axis counts, by the meta-RL family an environment's name starts with
X_LABELS = {"Meta-rl2/": "episode in trial", "Meta-maml/": "inner steps"}
MAX_ENVS = 12  # environments drawn at most (the table lists every one)
PANEL_HEIGHT = 240
COLUMNS = 3
SCRATCH_LABEL = "PPO from scratch (same tasks, same experience)"
SCRATCH_COLOUR = "#7f7f7f"


@dataclass
class AdaptationCurve:
    """One candidate's mean adaptation curve on one held-out environment."""

    candidate: str
    name: str
    is_baseline: bool
    env: str
    role: str  # validation | test
    purpose: str  # the evaluation that measured it: selection, validation, confirm, final
    seeds: int
    mean: list[float | None]  # the mean return at each point (None: no seed's was finite)
    # PPO from scratch with the same experience on the same tasks, at the same points; None
    # when the evaluation has none, and on the baseline program's curves (only the
    # incumbent's is drawn)
    scratch: list[float | None] | None = None

    @property
    def rounded(self) -> list[str]:
        """Each point to 3 significant digits ("—" where undefined), for the table."""
        return [significant(value) for value in self.mean]

    @property
    def scratch_rounded(self) -> list[str]:
        """The scratch curve's points as `rounded`'s; [] without one."""
        return [significant(value) for value in self.scratch or []]


def significant(value: float | None, digits: int = 3) -> str:
    """`value` to `digits` significant digits, e.g. 123.456 -> "123", 0.012345 -> "0.0123"."""
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:.{digits}g}"


def x_label(env: str) -> str:
    """What an adaptation curve's points count on `env`: episodes (RL²) or inner steps (MAML)."""
    for prefix, label in X_LABELS.items():
        if env.startswith(prefix):
            return label
    return "adaptation point"


def _curve(value, column: str = "adaptation") -> list[float | None] | None:
    """A stored `evaluations.<column>` (adaptation, scratch) as a curve; None when there is
    none or it is not a list of numbers or None (a column that did not parse is logged, not
    drawn)."""
    if value is None:
        return None
    ok = isinstance(value, list) and all(
        v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in value
    )
    if not ok:
        logger.warning("an evaluation's %s column is not a curve; left out: %.80r", column, value)
        return None
    return [None if v is None else float(v) for v in value] or None


def candidate_curves(
    archive: Archive, candidate: str, name: str, is_baseline: bool
) -> list[AdaptationCurve]:
    """A candidate's adaptation curves on the held-out roles, one per environment (the last
    full-stage evaluation written with one), validation envs first, each role in its order.

    Args:
        archive: the archive holding the candidate.
        candidate: its id.
        name: its name, as the table shows it.
        is_baseline: whether it is the baseline program.

    Returns:
        The curves; [] when no evaluation of it has one.
    """
    latest: dict[str, AdaptationCurve] = {}
    for row in archive.evaluations(candidate):
        mean = _curve(row.get("adaptation"))
        if mean is None or row.get("stage") != "full" or row.get("role") not in ROLES:
            continue
        if row.get("purpose") == "stability":  # a longer run: not the role's adaptation curve
            continue
        scratch = _curve(row.get("scratch"), "scratch")
        if scratch is not None and len(scratch) != len(mean):
            logger.warning("an evaluation's scratch curve does not match its points; left out")
            scratch = None
        latest.pop(row["env"], None)  # re-inserted: the environment's order is its latest
        latest[row["env"]] = AdaptationCurve(
            candidate=candidate,
            name=name,
            is_baseline=is_baseline,
            env=row["env"],
            role=row["role"],
            purpose=row.get("purpose") or "",
            seeds=len(row.get("seeds") or []),
            mean=mean,
            scratch=scratch,
        )
    return sorted(latest.values(), key=lambda c: ROLES.index(c.role))


def adaptation_curves(archive: Archive, story: RunStory) -> list[AdaptationCurve]:
    """The adaptation curves a run's page shows: its incumbent's (with their scratch
    curves), then the baseline program's when its evaluations carry them, without theirs (see
    the module's docstring); none at all when the incumbent has none (a PPO run whose
    baseline program, found in another run, has curves still shows no section).

    Args:
        archive: the archive holding the run.
        story: the run's story (its incumbent, and the baseline among its curves).

    Returns:
        The curves, grouped by candidate; [] when neither has one.
    """
    best = story.header.best_id  # the run's incumbent (`incumbents.run_incumbent`)
    baseline = next((c.id for c in story.curves if c.is_baseline), None)
    names = {c.id: c.name for c in story.curves} | {r.id: r.name for r in story.top}
    if not best:
        return []
    own = candidate_curves(archive, best, names.get(best) or "", best == baseline)
    if not own or not baseline or baseline == best:  # no curve of the run's own: no section
        return own
    theirs = candidate_curves(archive, baseline, names.get(baseline) or "", True)
    return own + [dataclasses.replace(curve, scratch=None) for curve in theirs]


def with_adaptation(archive: Archive, story: RunStory) -> RunStory:
    """`story` with its adaptation curves (`RunStory.adaptation`) read from `archive`."""
    return dataclasses.replace(story, adaptation=adaptation_curves(archive, story))


def adaptation_figure(curves: list[AdaptationCurve]) -> tuple[go.Figure, int]:
    """One small panel per held-out environment (at most MAX_ENVS): x the adaptation point
    (episode in a trial, or inner steps), y the mean return; the incumbent solid, the baseline
    program dashed, and the incumbent's evaluation's PPO from scratch dotted (SCRATCH_LABEL).

    Args:
        curves: the run's curves (`adaptation_curves`).

    Returns:
        The figure and how many environments it draws.
    """
    envs = list(dict.fromkeys((c.env, c.role) for c in curves))[:MAX_ENVS]
    columns = min(COLUMNS, max(1, len(envs)))
    rows = max(1, math.ceil(len(envs) / columns))
    fig = make_subplots(
        rows=rows,
        cols=columns,
        subplot_titles=[f"{env} ({role})" for env, role in envs],
        horizontal_spacing=0.08,
        vertical_spacing=min(0.3, 0.6 / rows),
    )
    shown: set[str] = set()
    candidates = list(dict.fromkeys(c.candidate for c in curves))
    for index, (env, role) in enumerate(envs):
        row, col = index // columns + 1, index % columns + 1
        for curve in (c for c in curves if (c.env, c.role) == (env, role)):
            order = candidates.index(curve.candidate)
            label = curve.candidate + (" (baseline)" if curve.is_baseline else " (incumbent)")
            colour = BASELINE_COLOUR if curve.is_baseline else PALETTE[order % len(PALETTE)]
            fig.add_trace(
                go.Scatter(
                    x=list(range(len(curve.mean))),
                    y=curve.mean,
                    mode="lines+markers",
                    name=label,
                    legendgroup=curve.candidate,
                    showlegend=curve.candidate not in shown,
                    line={"color": colour, "dash": "dash" if curve.is_baseline else "solid"},
                    hovertemplate=f"{label}<br>{env}<br>{x_label(env)} %{{x}}: "
                    "mean return %{y:.3g}<extra></extra>",
                ),
                row=row,
                col=col,
            )
            shown.add(curve.candidate)
            if curve.scratch is None:
                continue
            fig.add_trace(
                go.Scatter(
                    x=list(range(len(curve.scratch))),
                    y=curve.scratch,
                    mode="lines+markers",
                    name=SCRATCH_LABEL,
                    legendgroup="scratch",
                    showlegend="scratch" not in shown,
                    line={"color": SCRATCH_COLOUR, "dash": "dot"},
                    marker={"symbol": "circle-open"},
                    hovertemplate=f"{SCRATCH_LABEL}<br>{env}<br>{x_label(env)} %{{x}}: "
                    "mean return %{y:.3g}<extra></extra>",
                ),
                row=row,
                col=col,
            )
            shown.add("scratch")
        fig.update_xaxes(title_text=x_label(env), row=row, col=col)
        if col == 1:
            fig.update_yaxes(title_text="mean return", row=row, col=col)
    if max((len(c.mean) for c in curves), default=0) <= 20:
        fig.update_xaxes(dtick=1)
    return (
        _layout(
            fig,
            "adaptation on the held-out tasks (mean return over seeds)",
            height=PANEL_HEIGHT * rows + 110,
        ),
        len(envs),
    )
