"""The curriculum's plot: an LPG run's level buffer over its generations, drawn from the story's
plain data (`levels.curriculum_of`), in the style of figures.py (kept apart to keep that file
short).

Each generation's buffer snapshot (the top levels by score) is a column of markers: y its
score (GROOVE: the actor-critic reference's return minus the LPG agents'; PLR: the reference's
positive value loss), colour its staleness (levels drawn since it was last drawn). The levels
trained on that generation are outlined; a strip above says which generations replayed levels
from the buffer and which sampled new ones. A long run draws an even sample of its generations
(always the last), at most `limit` buffer markers.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from metarl.report.figures import HEIGHT, INCUMBENT_COLOUR, WORSE_COLOUR, _layout
from metarl.report.levels import CurriculumGeneration

REPLAY_COLOUR = "#ff7f0e"
FRESH_COLOUR = "#9aa5b1"
DRAWN_COLOUR = WORSE_COLOUR  # the outline of a level drawn that generation: red on any staleness
STALENESS_SCALE = "Viridis"
# what a curriculum's score is, by its kind (ESConfig.curriculum)
SCORES = {
    "groove": "regret (actor-critic return − LPG agents' return)",
    "plr": "PLR score (actor-critic positive value loss)",
}


def score_label(kind: str | None) -> str:
    """What the buffer's scores mean for curriculum `kind` (the run's config)."""
    return SCORES.get(kind or "", "score")


def thin(generations: list[CurriculumGeneration], limit: int) -> list[CurriculumGeneration]:
    """An even stride over `generations`, always with the last, drawing at most about `limit`
    buffer markers; all of them when they fit."""
    total = sum(len(g.buffer) for g in generations)
    if total <= limit or len(generations) < 2:
        return generations
    stride = math.ceil(total / max(1, limit))
    kept = generations[::stride]
    return kept if kept[-1] is generations[-1] else [*kept, generations[-1]]


def _hover(name: str, score: float | None, staleness: int, extra: str = "") -> str:
    value = "—" if score is None else f"{score:.3f}"
    return f"{name}<br>score {value}<br>staleness {staleness}{extra}"


def curriculum_buffer(
    generations: list[CurriculumGeneration], kind: str | None, limit: int
) -> tuple[go.Figure, int]:
    """The level buffer over generations, the levels drawn each generation outlined, replay
    generations marked.

    Args:
        generations: the run's curriculum (`RunStory.curriculum`), in order.
        kind: the curriculum (groove | plr): what the y axis says.
        limit: about the most buffer markers drawn (`thin`).

    Returns:
        The figure and how many generations it draws.
    """
    drawn_generations = thin(generations, limit)
    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, row_heights=[0.1, 0.9], vertical_spacing=0.03
    )
    for replay, colour, label in (
        (True, REPLAY_COLOUR, "replayed from the buffer"),
        (False, FRESH_COLOUR, "new levels sampled"),
    ):
        group = [g for g in drawn_generations if g.replay == replay]
        if group:
            fig.add_trace(
                go.Scatter(
                    x=[g.generation for g in group],
                    y=[0] * len(group),
                    mode="markers",
                    name=f"generation: {label}",
                    marker={"symbol": "square", "size": 9, "color": colour},
                    text=[
                        f"generation {g.generation}: {label}<br>"
                        + ", ".join(level.name for level in g.drawn[:8])
                        + (f" and {len(g.drawn) - 8} more" if len(g.drawn) > 8 else "")
                        for g in group
                    ],
                    hovertemplate="%{text}<extra></extra>",
                ),
                row=1,
                col=1,
            )
    levels = [(g, level) for g in drawn_generations for level in g.buffer]
    stalest = max((level.staleness for _, level in levels), default=0)
    for drawn in (False, True):
        group = [(g, level) for g, level in levels if level.drawn == drawn]
        if not group:
            continue
        line = {"width": 2, "color": DRAWN_COLOUR} if drawn else {"width": 0}
        fig.add_trace(
            go.Scatter(
                x=[g.generation for g, _ in group],
                y=[level.score for _, level in group],
                mode="markers",
                name="buffered, drawn this generation" if drawn else "buffered level",
                marker={
                    "size": 10 if drawn else 7,
                    "color": [level.staleness for _, level in group],
                    "coloraxis": "coloraxis",
                    "opacity": 1.0 if drawn else 0.75,
                    "line": line,
                },
                text=[
                    _hover(level.name, level.score, level.staleness, " · drawn" if drawn else "")
                    for _, level in group
                ],
                hovertemplate="%{text}<br>generation %{x}<extra></extra>",
            ),
            row=2,
            col=1,
        )
    # levels drawn but not in the buffer's snapshot (scored below its top, or not inserted)
    outside = [
        (g, level)
        for g in drawn_generations
        for level in g.drawn
        if level.regret is not None and level.seed not in {b.seed for b in g.buffer}
    ]
    if outside and kind == "groove":  # only GROOVE's score (regret) is recorded per draw
        fig.add_trace(
            go.Scatter(
                x=[g.generation for g, _ in outside],
                y=[level.regret for _, level in outside],
                mode="markers",
                name="drawn, not among the buffer's top",
                marker={"symbol": "diamond-open", "size": 9, "color": INCUMBENT_COLOUR},
                text=[f"{level.name}<br>regret {level.regret:.3f}" for _, level in outside],
                hovertemplate="%{text}<br>generation %{x}<extra></extra>",
            ),
            row=2,
            col=1,
        )
    fig.update_yaxes(visible=False, range=[-1, 1], row=1, col=1)
    fig.update_yaxes(title_text=score_label(kind), row=2, col=1)
    fig.update_xaxes(title_text="generation", row=2, col=1)
    if drawn_generations and drawn_generations[-1].generation <= 20:
        fig.update_xaxes(dtick=1)
    fig.update_layout(
        coloraxis={
            "colorscale": STALENESS_SCALE,
            "cmin": 0,
            "cmax": max(1, stalest),
            "colorbar": {"title": {"text": "staleness"}, "thickness": 12},
        }
    )
    return (
        _layout(
            fig,
            "curriculum: the level buffer over generations (outlined: drawn that generation)",
            height=HEIGHT + 80,
        ),
        len(drawn_generations),
    )
