"""The "Models" section: with several LLMs, which one got the proposals, and what they yielded.

A run given several `--model`s picks each proposal's model by fixed weights or by a bandit on
improvement per cost (discovery/proposers/llm/bandit.py). The LLM-calls section says what each
model cost; this one says whether the choice paid off: per model, over generations, its share
of the proposals, and its yield: proposals that passed, improvements found (a child that passed
with a training fitness above its best parent's), and the USD and seconds of its calls. Under a
bandit a model that yields more per unit of cost should take a growing share of the later
generations; under fixed weights the share stays put whatever the yield.

The rows come from the archive (archives/model_yield.py); `with_models` attaches them to a run's
story (`RunStory.models`) the way report/adaptation.py attaches its curves, and only for a run
whose LLM proposals came from more than one model.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from metarl.archives.model_yield import ModelGeneration, model_yield
from metarl.archives.store import Archive
from metarl.report.figures import PALETTE, _layout
from metarl.report.story import RunStory

MAX_ROWS = 30  # generation rows the table shows at most (longer runs: in equal blocks)


@dataclass
class ModelTotals:
    """One model over the whole run."""

    model: str
    proposals: int
    share: float  # of the run's LLM proposals
    passed: int
    improved: int
    improvement: float  # fitness gained by its improving children, summed
    calls: int
    cost_usd: float | None  # None when none of its calls had a known price
    latency_s: float

    @property
    def pass_rate(self) -> float | None:
        """Passed / proposed; None without a proposal."""
        return self.passed / self.proposals if self.proposals else None


@dataclass
class GenerationBlock:
    """One row of the generation table: a generation, or a block of them in a long run."""

    label: str  # "3", or "4–6"
    first: int
    proposals: dict[str, int]  # model -> proposals in the block
    improved: dict[str, int]
    passed: dict[str, int]

    def share(self, model: str) -> float | None:
        """`model`'s share of the block's proposals; None when the block has none."""
        total = sum(self.proposals.values())
        return self.proposals.get(model, 0) / total if total else None


@dataclass
class ModelsSection:
    """What the section shows: the models in order of first proposal, their totals, and the
    generations' rows (`rows` one per generation and model, `blocks` for the table)."""

    models: list[str]
    totals: list[ModelTotals]
    rows: list[ModelGeneration]
    blocks: list[GenerationBlock]
    choice: str  # the run's --model-choice ("weights" for a run from before the option)


def totals_of(rows: list[ModelGeneration], models: list[str]) -> list[ModelTotals]:
    """Each model's rows summed over the run.

    Args:
        rows: `model_yield` rows.
        models: the models, in the order to list them.

    Returns:
        One ModelTotals per model.
    """
    total = sum(r.proposals for r in rows)
    out = []
    for model in models:
        own = [r for r in rows if r.model == model]
        priced = [r.cost_usd for r in own if r.cost_usd is not None]
        proposals = sum(r.proposals for r in own)
        out.append(
            ModelTotals(
                model=model,
                proposals=proposals,
                share=proposals / total if total else 0.0,
                passed=sum(r.passed for r in own),
                improved=sum(r.improved for r in own),
                improvement=sum(r.improvement for r in own),
                calls=sum(r.calls for r in own),
                cost_usd=sum(priced) if priced else None,
                latency_s=sum(r.latency_s for r in own),
            )
        )
    return out


def blocks_of(rows: list[ModelGeneration], limit: int = MAX_ROWS) -> list[GenerationBlock]:
    """The generation table's rows: one per generation, or equal blocks of consecutive
    generations when there are more than `limit`.

    Args:
        rows: `model_yield` rows, by generation.
        limit: the most rows.

    Returns:
        The blocks, in generation order.
    """
    generations = sorted({r.generation for r in rows})
    size = max(1, math.ceil(len(generations) / max(1, limit)))
    out = []
    for start in range(0, len(generations), size):
        span = generations[start : start + size]
        inside = [r for r in rows if span[0] <= r.generation <= span[-1]]
        label = str(span[0]) if len(span) == 1 else f"{span[0]}–{span[-1]}"
        block = GenerationBlock(label, span[0], {}, {}, {})
        for r in inside:
            block.proposals[r.model] = block.proposals.get(r.model, 0) + r.proposals
            block.improved[r.model] = block.improved.get(r.model, 0) + r.improved
            block.passed[r.model] = block.passed.get(r.model, 0) + r.passed
        out.append(block)
    return out


def models_section(archive: Archive, run_id: str, choice: str) -> ModelsSection | None:
    """The section of run `run_id`, or None when its LLM proposals came from fewer than two
    models (a single-model run, or no LLM at all).

    Args:
        archive: the archive holding the run.
        run_id: the run.
        choice: its model choice, as the caption names it.
    """
    rows = model_yield(archive, run_id)
    proposing = list(dict.fromkeys(r.model for r in rows if r.proposals))
    if len(proposing) < 2:
        return None
    models = list(dict.fromkeys([*proposing, *(r.model for r in rows)]))
    return ModelsSection(
        models=models,
        totals=totals_of(rows, models),
        rows=rows,
        blocks=blocks_of(rows),
        choice=choice,
    )


def with_models(archive: Archive, story: RunStory) -> RunStory:
    """`story` with its Models section (`RunStory.models`) read from `archive`."""
    # a run from before the option chose by weights
    choice = story.header.config.get("model_choice") or "weights"
    return dataclasses.replace(story, models=models_section(archive, story.header.id, choice))


def models_figure(section: ModelsSection) -> go.Figure:
    """Two panels over generations: each model's share of the generation's proposals, and the
    improvements it found, cumulated.

    Args:
        section: the run's section.

    Returns:
        The figure.
    """
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("share of the generation's proposals", "improvements found (cumulative)"),
        horizontal_spacing=0.1,
    )
    generations = sorted({r.generation for r in section.rows})
    by_key = {(r.generation, r.model): r for r in section.rows}
    for index, model in enumerate(section.models):
        colour = PALETTE[index % len(PALETTE)]
        shares, found, running = [], [], 0
        for generation in generations:
            total = sum(r.proposals for r in section.rows if r.generation == generation)
            own = by_key.get((generation, model))
            shares.append((own.proposals if own else 0) / total if total else None)
            running += own.improved if own else 0
            found.append(running)
        common = {"legendgroup": model, "line": {"color": colour}, "mode": "lines+markers"}
        fig.add_trace(
            go.Scatter(
                x=generations,
                y=shares,
                name=model,
                hovertemplate=f"{model}<br>generation %{{x}}: %{{y:.0%}} of the proposals"
                "<extra></extra>",
                **common,
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=generations,
                y=found,
                name=model,
                showlegend=False,
                hovertemplate=f"{model}<br>by generation %{{x}}: %{{y}} improvements"
                "<extra></extra>",
                **common,
            ),
            row=1,
            col=2,
        )
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%", row=1, col=1)
    fig.update_xaxes(title_text="generation", row=1, col=1)
    fig.update_xaxes(title_text="generation", row=1, col=2)
    return _layout(fig, f"models over generations ({section.choice})")
