"""Program families (tasks/families.py): every member a family can draw keeps its task's
contract, checked by the task's own probes at the ends of every parameter range and at random
draws; the offline proposer's `family` operator proposes such members."""

from __future__ import annotations

import itertools
import random

import pytest

from metarl.discovery.proposers.base import ParentInfo, ProposalRequest
from metarl.discovery.proposers.mutation import MutationProposer
from metarl.tasks import get_task
from metarl.tasks.candidate import load_function, normalise_source

FAMILY_TASKS = [name for name in ("drift", "optimizer") if get_task(name).families]


def corners(family, every: bool):
    """The family at its parameters' range ends: all low and all high, or (`every`) every
    combination of them."""
    ends = [(p.low, p.high) for p in family.params]
    combos = itertools.product(*ends) if every else zip(*ends)
    for values in combos:
        yield dict(zip((p.name for p in family.params), values))


def check_members(task_name: str, every: bool, draws: int) -> None:
    task = get_task(task_name)
    rng = random.Random(0)
    for family in task.families:
        members = list(corners(family, every)) + [family.draw(rng)[1] for _ in range(draws)]
        for values in members:
            source = family.render(values)
            report = task.probes(load_function(source, task.function_name), 7)
            assert report.ok, f"{family.describe(values)}: {report.reason}"


@pytest.mark.parametrize("task_name", FAMILY_TASKS)
def test_every_family_passes_the_task_probes_at_its_range_ends(task_name):
    assert len(get_task(task_name).families) >= 5
    check_members(task_name, every=False, draws=0)


@pytest.mark.slow  # every corner of every range and random draws: ~100 probe runs
@pytest.mark.parametrize("task_name", FAMILY_TASKS)
def test_every_family_member_passes_the_task_probes(task_name):
    check_members(task_name, every=True, draws=3)


def test_a_family_draw_is_reproducible_and_names_its_parameters():
    family = get_task("drift").families[0]
    first, values = family.draw(random.Random(3))
    again, same = family.draw(random.Random(3))
    assert first == again and values == same
    assert all(repr(v) in first for v in values.values())
    assert family.describe(values).startswith(f"{family.name}(")


def test_the_family_operator_leaves_the_seeds_neighbourhood():
    """Proposals of the `family` operator are whole members of the task's families, not edits
    of the parent: their programs share no line with PPO-clip's body but the signature."""
    task = get_task("drift")
    parent = task.seed_program("ppo_clip")
    proposer = MutationProposer(weights={"family": 1.0}, chain_probability=0.0)
    seen = set()
    for seed in range(20):
        parents = [ParentInfo(id="p", code=parent.source, name="ppo_clip")]
        request = ProposalRequest(task=task, parents=parents, rng_seed=seed)
        proposal = proposer.propose(request)
        assert proposal.code is not None, proposal.failure
        assert proposal.operator == "family" and proposal.thought.startswith("family ")
        family = proposal.name.split(".")[0]
        assert family in {f.name for f in task.families}
        assert normalise_source(proposal.code) != normalise_source(parent.source)
        seen.add(family)
    assert len(seen) >= 4  # the draws spread over the families


def test_a_task_without_families_never_picks_the_family_operator():
    task = get_task("value_loss")
    assert not task.families
    parent = task.seed_programs()[0]
    proposer = MutationProposer()
    for seed in range(10):
        request = ProposalRequest(
            task=task, parents=[ParentInfo(id="p", code=parent.source)], rng_seed=seed
        )
        assert proposer.propose(request).operator != "family"
