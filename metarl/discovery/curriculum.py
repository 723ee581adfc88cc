"""Curriculum-driven discovery: each generation's training environments are drawn, not fixed.

With `--curriculum uniform|plr|groove` on a suite of drawn environments
(rl/environments/distributions.py: random grid levels, CartPole's parameter ranges), a
generation's children are trained and ranked on levels the curriculum
(rl/environments/curriculum.py) draws for that generation, and the levels are then scored
from what the children did there:

- uniform: fresh draws every generation, nothing kept;
- plr: the children's positive value loss on the level (mean over children and seeds, from
  their own PPO training: rl/ppo.py), Prioritized Level Replay's score;
- groove: the algorithmic regret against the task's baseline (PPO, trained by the cascade on
  the same seeds): 1 - the children's mean normalised score on the level, in normalised units
  (1 = the baseline), so levels where the baseline still beats the proposals are replayed.

Validation and test roles stay fixed (the suite's own draws and the tabular/classic test
envs), so the incumbent is still decided on environments no curriculum chose. The draw is part
of the planned generation (`Plan.draw`, `Plan.train_envs`), written before any child is
evaluated, so a resumed run trains the same generation on the same levels; the curriculum's
randomness is numpy's PCG64 seeded with (rng seed, generation), so a run is reproducible from
its `--rng-seed`.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from metarl.evaluation.outcome import Outcome
from metarl.rl.environments.curriculum import (
    Curriculum,
    CurriculumConfig,
    Draw,
    normalised_regret,
)
from metarl.rl.suites import get_suite

BUFFER_SNAPSHOT = 32  # levels of the buffer kept per generation in the history (by score)


def curriculum_of(config, state: dict | None) -> Curriculum:
    """The run's curriculum: restored from its state, or a new one from the config."""
    if state:
        return Curriculum.from_dict(state)
    return Curriculum(CurriculumConfig(kind=config.curriculum, capacity=config.curriculum_buffer))


def draw_levels(config, curriculum: Curriculum, generation: int) -> tuple[Draw, list[str]]:
    """Generation `generation`'s levels: the draw and the environment names it stands for.

    Args:
        config: the run's DiscoverConfig (resolved, with a curriculum).
        curriculum: the run's curriculum (its clock advances).
        generation: the generation being planned (1-based).

    Returns:
        (the draw, its environments' names in order).
    """
    rng = np.random.default_rng([int(config.rng_seed), int(generation)])
    draw = curriculum.draw(rng, int(config.curriculum_levels))
    distribution = get_suite(config.suite).distribution
    return draw, [distribution.env(seed) for seed in draw.seeds]


def level_scores(kind: str, envs: Sequence[str], outcomes: Sequence[Outcome]) -> list[float]:
    """Each drawn level's curriculum score from the children's outcomes (NaN: no child scored
    it, so it enters no buffer).

    Args:
        kind: the curriculum (uniform | plr | groove).
        envs: the generation's training environments.
        outcomes: the children's outcomes (failed ones have no scores and are skipped).

    Returns:
        One score per env, in order.
    """
    out = []
    for env in envs:
        scores = [
            s
            for o in outcomes
            if o is not None and o.passed
            for s in o.env_scores
            if s.env == env and s.role == "train" and s.stage == "full"
        ]
        if kind == "plr":
            values = [s.positive_value_loss for s in scores if s.positive_value_loss is not None]
            out.append(float(np.mean(values)) if values else math.nan)
        elif kind == "groove":
            values = [s.normalised for s in scores if s.normalised is not None]
            out.append(normalised_regret(values) if values else math.nan)
        else:
            out.append(0.0)
    return out


def history_entry(
    generation: int, draw: Draw, envs: Sequence[str], scores: Sequence[float], curriculum
) -> dict:
    """What the report shows of one generation's curriculum (JSON-ready; the keys of an LPG
    run's history, blackbox/lpg_es.py, where they mean the same)."""
    entries = sorted(curriculum.buffer.entries(), key=lambda e: -e.score)[:BUFFER_SNAPSHOT]
    finite = [x if math.isfinite(x) else None for x in map(float, scores)]
    return {
        "generation": generation,
        "replay": bool(draw.replay),
        "levels": [int(s) for s in draw.seeds],
        "envs": list(envs),
        "scores": finite,
        "regret": finite if curriculum.config.kind == "groove" else None,
        "buffer": [[int(e.seed), float(e.score), int(e.staleness)] for e in entries],
        "buffer_size": int(curriculum.buffer.size),
    }


def draw_from_dict(data: dict) -> Draw:
    return Draw(tuple(data["seeds"]), bool(data["replay"]), tuple(data.get("indices") or ()))
