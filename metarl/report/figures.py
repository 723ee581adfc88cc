"""The report's plots: one plotly figure per function, built from a story's plain data.

plotly because a researcher reading a run wants to hover a point and see which candidate it is,
zoom into a learning curve, hide a method from the legend; the page embeds plotly.js once, so it
opens offline. Scatters of more than `max_points` candidates draw an even sample of them beside
every incumbent and confirmed candidate (`sample`); lines and counts use every row.
"""

from __future__ import annotations

import math
from typing import TypeVar

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from metarl.report.comparison import Comparison
from metarl.report.curves import Curves
from metarl.report.generalisation import BASELINE, TEST_SOURCES, GapPoint, Generalisation
from metarl.report.points import Funnel, Point
from metarl.report.story import ModelUsage, RunStory

HEIGHT = 420
PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#17becf",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#7f7f7f",
)
BASELINE_COLOUR = "#222222"
WORSE_COLOUR = "#d62728"  # a test interval entirely below the baseline
INCUMBENT_COLOUR = "#f0b400"
Sampled = TypeVar("Sampled", Point, GapPoint)


def _layout(fig: go.Figure, title: str, height: int = HEIGHT, **axes) -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0.01, "font": {"size": 15}},
        template="plotly_white",
        height=height,
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
        legend={"orientation": "h", "y": -0.18},
        **axes,
    )
    return fig


def _rgba(hex_colour: str, alpha: float) -> str:
    red, green, blue = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({red},{green},{blue},{alpha})"


def _whole_ticks(fig: go.Figure, largest: int) -> None:
    """A tick per whole number on a short x axis (counts of candidates are whole)."""
    if largest <= 20:
        fig.update_xaxes(dtick=1)


def sample(points: list[Sampled], keep: set[str], limit: int) -> list[Sampled]:
    """At most `limit` of `points` (or all `keep` ones if more): every point whose id is in
    `keep`, and an even stride over the others, in their order."""
    if len(points) <= limit:
        return points
    kept = [p for p in points if p.id in keep]
    others = [p for p in points if p.id not in keep]
    room = max(0, limit - len(kept))
    stride = max(1, math.ceil(len(others) / room)) if room else len(others) + 1
    chosen = {p.id for p in others[::stride]} if room else set()
    return [p for p in points if p.id in keep or p.id in chosen]


def _errors(values: list[float], intervals: list[list[float] | None]) -> dict:
    """A plotly error-bar spec drawing each value's [low, high] interval (none: no bar)."""
    return {
        "type": "data",
        "symmetric": False,
        "array": [(ci[1] - v) if ci else 0 for v, ci in zip(values, intervals)],
        "arrayminus": [(v - ci[0]) if ci else 0 for v, ci in zip(values, intervals)],
        "thickness": 1,
        "width": 0,
    }


def _gap_text(point: GapPoint, runs: int) -> str:
    """A scatter point's hover text: the candidate, its test score's source and validation."""
    run = f" (run {point.run_id})" if runs > 1 else ""
    seeds = f" ({point.test_seeds} fresh seeds)" if point.test_seeds else ""
    validation = "" if point.validation is None else f"<br>validation {point.validation:.3f}"
    seed = " · seed program" if point.is_seed else ""
    return (
        f"{point.id} {point.name}{run}{seed}<br>test {TEST_SOURCES[point.test_source]}"
        f"{seeds}{validation}"
    )


def _overlay(fig: go.Figure, points: list, name: str, marker: dict, **hover) -> None:
    """Mark `points` of the train-vs-test scatter again with `marker` (seeds, the worse, the
    incumbent), as one marker-only trace; nothing when there are none."""
    if points:
        fig.add_trace(
            go.Scatter(
                x=[p.train for p in points],
                y=[p.test for p in points],
                mode="markers",
                name=name,
                marker=marker,
                **hover,
            )
        )


def generalisation_gap(runs: list[Generalisation], limit: int) -> tuple[go.Figure, int]:
    """Every scored candidate's train score (x) against its test score (y), with their 95%
    intervals as error bars: the diagonal y = x (no gap), the baseline on each axis (x = 1,
    y = 1), each run's incumbent as a star, and a red x on every candidate whose test interval
    lies entirely below the baseline, a square around every seed program. One run's points are
    coloured by where their test score comes from (final, confirmed, selection); several
    runs' by run.

    Args:
        runs: the runs' train-vs-test data (`generalisation.generalisation_of`).
        limit: the most points drawn per run (every incumbent, re-measured and significantly
            worse candidate kept, an even sample of the rest; `sample`).

    Returns:
        The figure and how many points it draws.
    """
    drawn = [
        p
        for run in runs
        for p in sample(
            run.points,
            {p.id for p in run.points if p.is_incumbent or p.worse or p.test_source != "selection"},
            limit,
        )
    ]
    colours = [c for c in PALETTE if c != WORSE_COLOUR]
    if len(runs) > 1:
        groups = {run.run_id: f"run {run.run_id}" for run in runs}
        key = "run_id"
    else:
        groups = {s: f"test {text} ({s})" for s, text in TEST_SOURCES.items()}
        key = "test_source"
    fig = go.Figure()
    colour_of = {}
    for index, (value, label) in enumerate(groups.items()):
        group = [p for p in drawn if getattr(p, key) == value]
        colour_of[value] = colours[index % len(colours)]
        if not group:
            continue
        fig.add_trace(
            go.Scatter(
                x=[p.train for p in group],
                y=[p.test for p in group],
                error_x=_errors([p.train for p in group], [p.train_ci for p in group]),
                error_y=_errors([p.test for p in group], [p.test_ci for p in group]),
                mode="markers",
                name=label,
                marker={"size": 8, "color": colour_of[value], "opacity": 0.8},
                text=[_gap_text(p, len(runs)) for p in group],
                hovertemplate="%{text}<br>train %{x:.3f}<br>test %{y:.3f}<extra></extra>",
            )
        )
    seeds = [p for p in drawn if p.is_seed]
    _overlay(
        fig,
        seeds,
        "seed program",
        {"symbol": "square-open", "size": 14, "color": BASELINE_COLOUR, "line": {"width": 1.5}},
        hoverinfo="skip",
    )
    worse = [p for p in drawn if p.worse]
    _overlay(
        fig,
        worse,
        "test interval below the baseline",
        {
            "symbol": "x-thin-open",
            "size": 16,
            "color": WORSE_COLOUR,
            "line": {"width": 3, "color": WORSE_COLOUR},
        },
        text=[p.id for p in worse],
        hovertemplate="%{text}: test %{y:.3f}, significantly worse than the baseline"
        "<extra></extra>",
    )
    best = [p for p in drawn if p.is_incumbent]
    _overlay(
        fig,
        best,
        "incumbent" if len(runs) == 1 else "each run's incumbent",
        {
            "symbol": "star",
            "size": 17,
            "color": [colour_of[getattr(p, key)] for p in best]
            if len(runs) > 1
            else INCUMBENT_COLOUR,
            "line": {"color": BASELINE_COLOUR, "width": 1.5},
        },
        text=[p.id for p in best],
        hovertemplate="incumbent %{text}<br>train %{x:.3f}<br>test %{y:.3f}<extra></extra>",
    )
    ends = [BASELINE, 0.0]
    for p in drawn:
        ends += [p.train, p.test, *(p.train_ci or []), *(p.test_ci or [])]
    low, high = min(ends), max(ends)
    pad = 0.05 * (high - low or 1.0)
    fig.add_trace(
        go.Scatter(
            x=[low - pad, high + pad],
            y=[low - pad, high + pad],
            mode="lines",
            line={"color": "#999", "dash": "dash", "width": 1},
            name="test = train (no gap)",
            hoverinfo="skip",
        )
    )
    fig.add_hline(y=BASELINE, line={"color": "#999", "dash": "dot", "width": 1})
    fig.add_vline(
        x=BASELINE,
        line={"color": "#999", "dash": "dot", "width": 1},
        annotation_text="baseline",
        annotation_position="bottom right",
    )
    return (
        _layout(
            fig,
            "train against test score: the generalisation gap (1.0 = the baseline program)",
            height=HEIGHT + 60,
            xaxis_title="train score (normalised fitness, 95% interval)",
            yaxis_title="test score (held-out envs, 95% interval)",
        ),
        len(drawn),
    )


def fitness_over_evaluations(story: RunStory, limit: int) -> tuple[go.Figure, int]:
    """Every scored candidate's fitness by proposal order, coloured by method and proposer; the
    incumbent as a step line, confirmed re-evaluations as diamonds, the incumbent's held-out
    score beside it. Returns the figure and how many points it draws."""
    scored = [p for p in story.points if p.fitness is not None]
    keep = set(story.incumbent.ids) | {p.id for p in scored if p.confirmed is not None}
    drawn = sample(scored, keep, limit)
    fig = go.Figure()
    labels = list(dict.fromkeys(p.label for p in drawn))
    for index, label in enumerate(labels):
        group = [p for p in drawn if p.label == label]
        fig.add_trace(
            go.Scatter(
                x=[p.seq for p in group],
                y=[p.fitness for p in group],
                mode="markers",
                name=label,
                marker={"size": 7, "color": PALETTE[index % len(PALETTE)], "opacity": 0.75},
                text=[f"{p.id} {p.name}" for p in group],
                hovertemplate="%{text}<br>evaluation %{x}<br>fitness %{y:.3f}<extra></extra>",
            )
        )
    confirmed = [p for p in drawn if p.confirmed is not None]
    if confirmed:
        fig.add_trace(
            go.Scatter(
                x=[p.seq for p in confirmed],
                y=[p.confirmed for p in confirmed],
                mode="markers",
                name="confirmed on more seeds",
                marker={"symbol": "diamond-open", "size": 11, "color": BASELINE_COLOUR},
                text=[p.id for p in confirmed],
                hovertemplate="%{text} confirmed %{y:.3f}<extra></extra>",
            )
        )
    last = max((p.seq for p in story.points), default=0)
    incumbent = story.incumbent
    if incumbent.seq:
        fig.add_trace(
            go.Scatter(
                x=incumbent.seq + [last],
                y=incumbent.score + [incumbent.score[-1]],
                mode="lines",
                line={"shape": "hv", "color": BASELINE_COLOUR, "width": 2},
                name="incumbent",
                text=incumbent.ids + [incumbent.ids[-1]],
                hovertemplate="incumbent %{text}: %{y:.3f}<extra></extra>",
            )
        )
        if any(h is not None for h in incumbent.heldout):
            fig.add_trace(
                go.Scatter(
                    x=incumbent.seq + [last],
                    y=incumbent.heldout + [incumbent.heldout[-1]],
                    mode="lines",
                    line={"shape": "hv", "color": "#ff7f0e", "width": 2, "dash": "dash"},
                    name="incumbent's held-out score",
                    connectgaps=False,
                    hovertemplate="held-out %{y:.3f}<extra></extra>",
                )
            )
    fig.add_hline(y=1.0, line={"color": "#999", "dash": "dot", "width": 1})
    _whole_ticks(fig, last)
    return (
        _layout(
            fig,
            "fitness over evaluations (1.0 = the baseline program)",
            xaxis_title="evaluation (candidates in proposal order, seed programs first)",
            xaxis_tickformat="d",
            yaxis_title="normalised fitness",
        ),
        len(drawn),
    )


def learning_curves(curves: list[Curves]) -> go.Figure:
    """Per environment: each candidate's mean return over training, the seed spread (±1 std)
    as a band, the baseline program dashed."""
    envs = list(dict.fromkeys(env.env for c in curves for env in c.envs))
    heldout = {env.env for c in curves for env in c.envs if env.heldout}
    columns = min(3, max(1, len(envs)))
    rows = max(1, math.ceil(len(envs) / columns))
    titles = [f"{env} (held out)" if env in heldout else env for env in envs]
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=titles or [""])
    for index, candidate in enumerate(curves):
        colour = BASELINE_COLOUR if candidate.is_baseline else PALETTE[index % len(PALETTE)]
        name = f"{candidate.id} {candidate.name}" + (" (baseline)" if candidate.is_baseline else "")
        for env in candidate.envs:
            position = envs.index(env.env)
            row, col = position // columns + 1, position % columns + 1
            first = env.env == envs[0] or not any(e.env == envs[0] for e in candidate.envs)
            pairs = [(s, m) for s, m in zip(env.steps, env.mean) if m is not None]
            if env.std and len(env.std) == len(env.mean):
                band = [
                    (s, m, sd)
                    for s, m, sd in zip(env.steps, env.mean, env.std)
                    if m is not None and sd is not None
                ]
                if band:
                    fig.add_trace(
                        go.Scatter(
                            x=[b[0] for b in band] + [b[0] for b in reversed(band)],
                            y=[b[1] + b[2] for b in band] + [b[1] - b[2] for b in reversed(band)],
                            fill="toself",
                            fillcolor=_rgba(colour, 0.15),
                            line={"width": 0},
                            hoverinfo="skip",
                            showlegend=False,
                            legendgroup=candidate.id,
                        ),
                        row=row,
                        col=col,
                    )
            fig.add_trace(
                go.Scatter(
                    x=[p[0] for p in pairs],
                    y=[p[1] for p in pairs],
                    mode="lines",
                    name=name,
                    legendgroup=candidate.id,
                    showlegend=first,
                    line={
                        "color": colour,
                        "width": 2,
                        "dash": "dash" if candidate.is_baseline else "solid",
                    },
                    hovertemplate=f"{candidate.id}<br>step %{{x}}<br>return %{{y:.2f}}"
                    "<extra></extra>",
                ),
                row=row,
                col=col,
            )
    fig.update_xaxes(title_text="environment steps")
    fig.update_yaxes(title_text="return", col=1)
    return _layout(
        fig,
        "learning curves: mean over training seeds, band = ±1 std over seeds",
        height=max(HEIGHT, 330 * rows + 90),
    )


def environment_scores(curves: list[Curves]) -> go.Figure:
    """Per environment, each top candidate's normalised score with its 95% interval."""
    fig = go.Figure()
    for index, candidate in enumerate(curves):
        colour = BASELINE_COLOUR if candidate.is_baseline else PALETTE[index % len(PALETTE)]
        envs = [e for e in candidate.envs if e.normalised is not None]
        fig.add_trace(
            go.Bar(
                x=[f"{e.env} (held out)" if e.heldout else e.env for e in envs],
                y=[e.normalised for e in envs],
                name=f"{candidate.id} {candidate.name}",
                marker={"color": colour},
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [
                        (e.normalised_ci[1] - e.normalised) if e.normalised_ci else 0 for e in envs
                    ],
                    "arrayminus": [
                        (e.normalised - e.normalised_ci[0]) if e.normalised_ci else 0 for e in envs
                    ],
                },
                hovertemplate=f"{candidate.id}<br>%{{x}}: %{{y:.3f}}<extra></extra>",
            )
        )
    fig.add_hline(y=1.0, line={"color": "#999", "dash": "dot", "width": 1})
    return _layout(
        fig,
        "normalised score per environment, 95% bootstrap interval over seeds",
        barmode="group",
        yaxis_title="normalised score (1.0 = baseline)",
    )


def funnel(data: Funnel) -> go.Figure:
    """How many proposals entered each stage of the cascade, and how many passed them all."""
    stages = [s for s in data.stages]
    fig = go.Figure(
        go.Funnel(
            y=[s.label for s in stages] + ["passed every stage"],
            x=[s.entered for s in stages] + [data.passed],
            textinfo="value+percent initial",
            marker={"color": "#1f77b4"},
        )
    )
    faults = f" ({data.faults} evaluator faults not judged)" if data.faults else ""
    return _layout(fig, f"the cascade: where {data.total} proposals stopped{faults}", height=380)


def llm_usage(usage: list[ModelUsage]) -> go.Figure:
    """Per model over the run: tokens per call, latency per call, cumulative cost."""
    fig = make_subplots(
        rows=1,
        cols=3,
        subplot_titles=("tokens per call", "latency per call (s)", "cumulative cost (USD)"),
    )
    for index, model in enumerate(usage):
        colour = PALETTE[index % len(PALETTE)]
        common = {"legendgroup": model.model, "marker": {"color": colour, "size": 5}}
        fig.add_trace(
            go.Scatter(x=model.minutes, y=model.tokens, mode="markers", name=model.model, **common),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=model.minutes, y=model.latency_s, mode="markers", showlegend=False, **common
            ),
            row=1,
            col=2,
        )
        if model.cost_usd is not None:
            fig.add_trace(
                go.Scatter(
                    x=model.minutes,
                    y=model.cumulative_cost,
                    mode="lines",
                    showlegend=False,
                    legendgroup=model.model,
                    line={"color": colour, "shape": "hv"},
                ),
                row=1,
                col=3,
            )
    if all(model.cost_usd is None for model in usage):
        left, right = fig.layout.xaxis3.domain  # the cost panel, which has no trace
        fig.add_annotation(
            text="no call had a known price:<br>cost unknown (not zero)",
            xref="paper",
            yref="paper",
            x=(left + right) / 2,
            y=0.5,
            showarrow=False,
        )
    fig.update_xaxes(title_text="minutes since the run started")
    return _layout(fig, "LLM calls per model", height=400)


def es_generations(history: list[dict]) -> go.Figure:
    """An ES run's members' fitness per generation (best, mean ± std) and its sigma."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    generations = [h["generation"] for h in history]
    means = [h.get("mean") for h in history]
    stds = [h.get("std") or 0.0 for h in history]
    upper = [m + s if m is not None else None for m, s in zip(means, stds)]
    lower = [m - s if m is not None else None for m, s in zip(means, stds)]
    fig.add_trace(
        go.Scatter(
            x=generations + generations[::-1],
            y=upper + lower[::-1],
            fill="toself",
            fillcolor=_rgba(PALETTE[0], 0.15),
            line={"width": 0},
            hoverinfo="skip",
            name="mean ± std of members",
        ),
        secondary_y=False,
    )
    fig.add_trace(
        go.Scatter(x=generations, y=means, name="mean member", line={"color": PALETTE[0]}),
        secondary_y=False,
    )
    fig.add_trace(
        go.Scatter(
            x=generations,
            y=[h.get("best") for h in history],
            name="best member",
            line={"color": PALETTE[1]},
        ),
        secondary_y=False,
    )
    fig.add_trace(
        go.Scatter(
            x=generations,
            y=[h.get("sigma") for h in history],
            name="sigma",
            line={"color": "#777", "dash": "dot"},
        ),
        secondary_y=True,
    )
    fig.update_xaxes(title_text="generation")
    fig.update_yaxes(title_text="ES fitness (normalised return)", secondary_y=False)
    fig.update_yaxes(title_text="sigma", secondary_y=True)
    return _layout(fig, "evolution strategy: members' fitness and sigma per generation")


def grpo_steps(steps: list[dict]) -> go.Figure:
    """A GRPO run's mean reward and per-stage pass rates per optimiser step."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("mean reward", "pass rate per stage"))
    x = [s["step"] for s in steps]
    fig.add_trace(
        go.Scatter(x=x, y=[s.get("mean_reward") for s in steps], name="mean reward"),
        row=1,
        col=1,
    )
    stages = list(dict.fromkeys(k for s in steps for k in (s.get("pass_rates") or {})))
    for index, stage in enumerate(stages):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[(s.get("pass_rates") or {}).get(stage) for s in steps],
                name=f"passed {stage}",
                line={"color": PALETTE[(index + 1) % len(PALETTE)]},
            ),
            row=1,
            col=2,
        )
    fig.update_xaxes(title_text="optimiser step")
    fig.update_yaxes(range=[0, 1.02], row=1, col=2)
    return _layout(fig, "GRPO on the proposer: reward and pass rates per step")


def comparison_curves(comparison: Comparison) -> go.Figure:
    """Every run's best child's score so far against the number of children: sample
    efficiency (not the incumbent, which validation races may decide)."""
    fig = go.Figure()
    for index, run in enumerate(comparison.runs):
        name = f"{run.run_id} {run.method}" + (f" ({run.proposer})" if run.proposer else "")
        if run.differs:
            name += " ≠ " + ", ".join(run.differs)
        fig.add_trace(
            go.Scatter(
                x=list(range(1, len(run.best_so_far) + 1)),
                y=run.best_so_far,
                mode="lines+markers",
                marker={"size": 5},
                line={
                    "shape": "hv",
                    "color": PALETTE[index % len(PALETTE)],
                    "dash": "dot" if run.differs else "solid",
                },
                name=name,
            )
        )
    fig.add_hline(
        y=1.0,
        line={"color": "#999", "dash": "dot", "width": 1},
        annotation_text="baseline",
        annotation_position="bottom right",
    )
    _whole_ticks(fig, max((len(r.best_so_far) for r in comparison.runs), default=0))
    return _layout(
        fig,
        "best child's score so far against children (dotted: not comparable with the others)",
        xaxis_title="children (candidates proposed, seed programs not counted)",
        xaxis_tickformat="d",
        yaxis_title="best child's normalised score",
    )
