"""Selection, islands, migration, novelty, the noise-aware incumbent rule, source dedup."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np

from metarl.discovery import selection
from metarl.discovery.selection import Islands, Member, code_tokens, combined_scores
from metarl.tasks import get_task
from metarl.tasks.candidate import source_hash

PPO = get_task("drift").seed_program("ppo_clip").source
LPO = get_task("drift").seed_program("lpo").source


def _members(fitness: dict[str, float], code: dict[str, str] | None = None) -> dict[str, Member]:
    code = code or {}
    return {k: Member(k, f, code_tokens(code.get(k, PPO))) for k, f in fitness.items()}


def test_tournament_prefers_fitter_members():
    rng = np.random.default_rng(0)
    members = list(_members({"a": 0.2, "b": 0.9, "c": 0.5, "d": 0.1}).values())
    scores = combined_scores(members, novelty_weight=0.0)
    picks = Counter(selection.tournament(rng, members, scores, 3).id for _ in range(400))
    assert picks["b"] > picks["c"] > picks["a"]
    assert picks["d"] == 0  # never the best of a 3-tournament among 4


def test_novelty_rewards_structurally_different_programs():
    mutant = PPO.replace("1.0 - epsilon", "0.9 - epsilon")
    members = list(
        _members(
            {"ppo": 1.0, "ppo2": 1.0, "lpo": 1.0}, {"ppo": PPO, "ppo2": mutant, "lpo": LPO}
        ).values()
    )
    novelty = [selection.novelty(m, members) for m in members]
    assert novelty[2] > novelty[0] and novelty[2] > novelty[1]
    scores = combined_scores(members, novelty_weight=1.0)
    assert scores[2] == max(scores)
    assert selection.distance(code_tokens(PPO), code_tokens(PPO)) == 0.0


def test_truncation_keeps_elite_and_capacity():
    ids = [f"c{i}" for i in range(8)]
    lookup = _members({cid: i / 10 for i, cid in enumerate(ids)})
    islands = Islands([list(ids)], capacity=3)
    islands.truncate(lookup, novelty_weight=0.0)
    assert islands.members[0] == ["c5", "c6", "c7"]
    islands = Islands([list(ids)], capacity=3)
    islands.truncate(lookup, novelty_weight=5.0)  # novelty ties here: still keeps the elite
    assert "c7" in islands.members[0] and len(islands.members[0]) == 3


def test_migration_ring():
    lookup = _members({"a": 1.0, "b": 0.5, "x": 2.0, "y": 0.1})
    islands = Islands([["a", "b"], ["x", "y"]], capacity=5)
    moves = islands.migrate(lookup)
    assert ("a", 0, 1) in moves and ("x", 1, 0) in moves
    assert "x" in islands.members[0] and "a" in islands.members[1]
    assert Islands.from_state(json.loads(json.dumps(islands.to_state()))) == islands


def test_plan_is_deterministic_and_resumable():
    lookup = _members({"a": 1.0, "b": 0.5, "c": 0.8})
    islands = Islands([["a", "b"], ["b", "c"]], capacity=4)
    rng = selection.rng_from_state(None, 7)
    first = selection.plan_children(rng, islands, lookup, 4, crossover_probability=0.5)
    saved = json.loads(json.dumps(selection.rng_state(rng)))  # through JSON, as in the archive
    after = selection.plan_children(rng, islands, lookup, 4, crossover_probability=0.5)
    replay = selection.plan_children(
        selection.rng_from_state(None, 7), islands, lookup, 4, crossover_probability=0.5
    )
    assert [p.__dict__ for p in replay] == [p.__dict__ for p in first]
    resumed = selection.plan_children(
        selection.rng_from_state(saved, 7), islands, lookup, 4, crossover_probability=0.5
    )
    assert [p.__dict__ for p in resumed] == [p.__dict__ for p in after]
    assert [p.island for p in first] == [0, 1, 0, 1]
    for plan in first:
        assert set(plan.parent_ids) <= set(islands.members[plan.island])
        assert len(set(plan.parent_ids)) == len(plan.parent_ids)


def test_noise_aware_contenders():
    # only children beating the incumbent's (confirmed) score contend, best first, one at a time
    children = [("c1", 1.05), ("c2", 1.2), ("c3", None), ("c4", 0.7)]
    assert selection.contenders(children, incumbent_score=1.0) == ["c2"]
    assert selection.contenders(children, incumbent_score=1.0, limit=2) == ["c2", "c1"]
    assert selection.contenders(children, incumbent_score=1.3) == []
    assert selection.score_of(1.2, 0.95) == 0.95  # a confirmed score replaces the lucky one
    assert selection.score_of(1.2, None) == 1.2
    assert selection.score_of(None, None) == float("-inf")


def test_source_dedup_ignores_comments_and_formatting():
    variant = (
        "# a comment\ndef drift(ratio, advantage, epsilon):\n    '''doc'''\n"
        "    clipped_ratio = jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)\n"
        "    return jax.nn.relu((ratio - clipped_ratio)   *   advantage)\n"
    )
    assert source_hash(variant) == source_hash(PPO)
    assert source_hash(PPO.replace("1.0 +", "1.1 +")) != source_hash(PPO)
