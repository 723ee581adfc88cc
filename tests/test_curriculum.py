"""Level samplers for curricula (metarl.rl.environments.curriculum): PLR's weights against
hand-computed vectors, the buffer's insertion rules, reproducibility and the JSON round trip,
and the score functions. Fast: numpy only, tiny buffers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from metarl.errors import USAGE
from metarl.rl.environments.curriculum import (
    CURRICULA,
    Curriculum,
    CurriculumConfig,
    CurriculumError,
    Draw,
    LevelBuffer,
    LevelEntry,
    algorithmic_regret,
    normalised_regret,
    positive_value_loss,
    replay_weights,
    score_weights,
    staleness_weights,
)


def buffer_of(
    seeds: list[int], scores: list[float], last: list[int], clock: int, capacity: int
) -> LevelBuffer:
    """A buffer whose first len(seeds) entries are filled as given."""
    buffer = LevelBuffer.empty(capacity)
    size = len(seeds)
    buffer.seeds[:size] = seeds
    buffer.scores[:size] = scores
    buffer.last_sampled[:size] = last
    buffer.size, buffer.clock = size, clock
    return buffer


def plr(capacity: int = 4, **changes) -> Curriculum:
    """A PLR curriculum with a small buffer."""
    return Curriculum(CurriculumConfig(kind="plr", capacity=capacity, **changes))


def insert(curriculum: Curriculum, seeds: list[int], scores: list[float]) -> None:
    """Feed back new levels as if `draw` had produced them."""
    curriculum.update(Draw(tuple(seeds), False, ()), scores)


def test_rank_weights_at_temperature_one_are_reciprocal_ranks_normalised():
    buffer = buffer_of([7, 8, 9], [3.0, 1.0, 2.0], [0, 0, 0], 0, capacity=3)
    np.testing.assert_allclose(score_weights(buffer, 1.0), [6 / 11, 2 / 11, 3 / 11])


def test_rank_weights_at_temperature_half_are_squared_reciprocal_ranks_normalised():
    buffer = buffer_of([7, 8, 9], [3.0, 1.0, 2.0], [0, 0, 0], 0, capacity=3)
    np.testing.assert_allclose(score_weights(buffer, 0.5), [36 / 49, 4 / 49, 9 / 49])


def test_rank_weights_give_unfilled_entries_zero_and_break_ties_by_index():
    buffer = buffer_of([7, 8], [5.0, 5.0], [0, 0], 0, capacity=4)
    np.testing.assert_allclose(score_weights(buffer, 1.0), [2 / 3, 1 / 3, 0.0, 0.0])
    assert not score_weights(LevelBuffer.empty(3), 1.0).any()


def test_staleness_weights_are_time_since_sampled_normalised():
    buffer = buffer_of([7, 8, 9], [0.0, 0.0, 0.0], [10, 4, 7], 10, capacity=4)
    np.testing.assert_allclose(staleness_weights(buffer), [0.0, 6 / 9, 3 / 9, 0.0])


def test_staleness_weights_are_uniform_over_filled_entries_when_all_fresh():
    buffer = buffer_of([7, 8, 9], [0.0, 0.0, 0.0], [10, 10, 10], 10, capacity=4)
    np.testing.assert_allclose(staleness_weights(buffer), [1 / 3, 1 / 3, 1 / 3, 0.0])


def test_replay_weights_mix_rank_and_staleness_by_the_staleness_coefficient():
    # 0.7 * [6/11, 2/11, 3/11] + 0.3 * [0, 6/9, 3/9] = [42, 36, 32] / 110
    buffer = buffer_of([7, 8, 9], [3.0, 1.0, 2.0], [10, 4, 7], 10, capacity=3)
    config = CurriculumConfig(kind="plr", capacity=3, staleness_coeff=0.3)
    np.testing.assert_allclose(replay_weights(buffer, config), [21 / 55, 18 / 55, 16 / 55])


def test_uniform_never_replays_and_never_fills_the_buffer():
    curriculum = Curriculum(CurriculumConfig(kind="uniform", capacity=4, minimum_fill=0.0))
    rng = np.random.default_rng(0)
    for _ in range(20):
        draw = curriculum.draw(rng, 3)
        assert not draw.replay and draw.indices == () and len(draw.seeds) == 3
        curriculum.update(draw, [1.0, 2.0, 3.0])
    assert curriculum.buffer.size == 0
    assert curriculum.buffer.clock == 60


def test_plr_does_not_replay_before_minimum_fill():
    curriculum = plr(capacity=4, replay_prob=1.0, minimum_fill=0.5)
    rng = np.random.default_rng(0)
    first = curriculum.draw(rng, 1)
    assert not first.replay
    curriculum.update(first, [1.0])  # 1 of 4 filled: below the 2 needed
    second = curriculum.draw(rng, 1)
    assert not second.replay
    curriculum.update(second, [2.0])  # 2 of 4: replay is now certain at replay_prob 1
    assert not curriculum.draw(rng, 3).replay  # more levels than the buffer holds: fresh
    third = curriculum.draw(rng, 2)
    assert third.replay
    assert sorted(third.indices) == [0, 1]  # distinct levels, never one twice
    assert third.seeds == tuple(int(curriculum.buffer.seeds[i]) for i in third.indices)
    assert curriculum.buffer.clock == 7
    assert all(curriculum.buffer.last_sampled[i] == 7 for i in third.indices)


def test_replayed_entries_take_their_new_scores():
    curriculum = plr(capacity=2, replay_prob=1.0, minimum_fill=1.0)
    insert(curriculum, [11, 12], [1.0, 2.0])
    curriculum.update(Draw((12, 11, 12), True, (1, 0, 1)), [4.0, 0.5, 6.0])
    assert curriculum.buffer.scores.tolist() == [0.5, 5.0]  # index 1 drawn twice: mean


def test_insertion_appends_then_replaces_the_lowest_score_only_when_beaten():
    curriculum = plr(capacity=3)
    insert(curriculum, [1, 2, 3], [5.0, 2.0, 4.0])
    insert(curriculum, [4], [1.0])  # does not beat the lowest (2.0): dropped
    assert [e.seed for e in curriculum.buffer.entries()] == [1, 2, 3]
    insert(curriculum, [5], [2.0])  # a tie does not beat it either
    assert [e.seed for e in curriculum.buffer.entries()] == [1, 2, 3]
    insert(curriculum, [6], [3.0])  # beats 2.0: takes seed 2's slot
    assert [(e.seed, e.score) for e in curriculum.buffer.entries()] == [
        (1, 5.0),
        (6, 3.0),
        (3, 4.0),
    ]


def test_a_new_level_with_a_buffered_seed_updates_it_in_place():
    curriculum = plr(capacity=3)
    insert(curriculum, [1, 2], [5.0, 2.0])
    curriculum.buffer.clock = 9
    insert(curriculum, [2, 2], [7.0, 8.0])
    assert curriculum.buffer.entries() == [LevelEntry(1, 5.0, 9), LevelEntry(2, 8.0, 0)]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_scores_never_enter_the_buffer(bad):
    curriculum = plr(capacity=2)
    insert(curriculum, [1, 2], [bad, 3.0])
    assert [e.seed for e in curriculum.buffer.entries()] == [2]
    insert(curriculum, [3, 4], [bad, bad])  # not even into the free slot
    assert [e.seed for e in curriculum.buffer.entries()] == [2]


def test_a_buffered_level_scored_non_finite_is_evicted():
    curriculum = plr(capacity=3)
    insert(curriculum, [1, 2, 3], [5.0, 2.0, 4.0])
    curriculum.update(Draw((1,), True, (0,)), [math.nan])
    assert [e.seed for e in curriculum.buffer.entries()] == [2, 3]
    assert curriculum.buffer.seeds.tolist() == [2, 3, 0]
    insert(curriculum, [3], [math.inf])
    assert [e.seed for e in curriculum.buffer.entries()] == [2]


def filled_plr() -> Curriculum:
    """A PLR curriculum past minimum fill, with varied scores and staleness."""
    curriculum = plr(capacity=8, replay_prob=0.5, minimum_fill=0.5)
    rng = np.random.default_rng(1)
    for step in range(6):
        draw = curriculum.draw(rng, 3)
        curriculum.update(draw, [float(step + k) for k in range(3)])
    return curriculum


def test_the_same_generator_seed_and_buffer_state_give_the_same_draws():
    one, two = filled_plr(), filled_plr()
    rng_one, rng_two = np.random.default_rng(7), np.random.default_rng(7)
    draws = [(one.draw(rng_one, 4), two.draw(rng_two, 4)) for _ in range(10)]
    assert all(a == b for a, b in draws)
    assert any(a.replay for a, _ in draws) and any(not a.replay for a, _ in draws)


def test_the_json_round_trip_preserves_state_and_subsequent_draws_exactly():
    original = filled_plr()
    restored = Curriculum.from_dict(json.loads(json.dumps(original.to_dict())))
    assert restored.config == original.config
    assert restored.buffer.entries() == original.buffer.entries()
    assert restored.buffer.to_dict() == original.buffer.to_dict()
    rng_one, rng_two = np.random.default_rng(3), np.random.default_rng(3)
    for step in range(10):
        a, b = original.draw(rng_one, 3), restored.draw(rng_two, 3)
        assert a == b
        scores = [step / 7, -step / 3, 1 / (step + 1)]
        original.update(a, scores)
        restored.update(b, scores)
    assert restored.buffer.to_dict() == original.buffer.to_dict()


def test_update_rejects_a_score_count_that_does_not_match_the_draw():
    curriculum = plr()
    with pytest.raises(CurriculumError, match="2 scores for a draw of 3"):
        insert(curriculum, [1, 2, 3], [1.0, 2.0])


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"kind": "robust"}, "unknown curriculum"),
        ({"capacity": 0}, "capacity"),
        ({"replay_prob": 1.5}, "replay_prob"),
        ({"staleness_coeff": -0.1}, "staleness_coeff"),
        ({"temperature": 0.0}, "temperature"),
        ({"minimum_fill": math.nan}, "minimum_fill"),
    ],
)
def test_bad_settings_raise_a_usage_error(changes, message):
    with pytest.raises(CurriculumError, match=message) as caught:
        CurriculumConfig(**changes).validate()
    assert caught.value.exit_code == USAGE
    assert isinstance(caught.value, ValueError)
    assert set(CURRICULA) == {"uniform", "plr", "groove"}


def test_positive_value_loss_is_the_mean_positive_advantage_over_all_steps():
    advantages = np.array([[1.0, -2.0], [0.5, 2.5]])
    assert positive_value_loss(advantages) == pytest.approx(1.0)  # (1 + 0 + 0.5 + 2.5) / 4
    assert positive_value_loss(np.array([-1.0, -3.0])) == 0.0


def test_algorithmic_regret_is_reference_minus_agent_return():
    assert algorithmic_regret(reference_return=200.0, agent_return=150.0) == 50.0
    assert algorithmic_regret(reference_return=10.0, agent_return=12.5) == -2.5


def test_normalised_regret_is_one_minus_the_mean_normalised_score():
    assert normalised_regret([1.0, 0.5, 0.0]) == pytest.approx(0.5)
    assert normalised_regret([1.2, 1.0]) == pytest.approx(-0.1)
