"""Building blocks (tasks/building_blocks.py) and the offline proposer's `term` operator: the
terms keep each task's contract (checked by the task's own probes), the operator swaps and adds
them in the candidate's own argument names, reproducibly, and only for tasks that declare them.
"""

from __future__ import annotations

import ast

import pytest

from metarl.discovery.proposers.base import ParentInfo, ProposalRequest
from metarl.discovery.proposers.mutation import MutationProposer
from metarl.tasks import get_task
from metarl.tasks.building_blocks import BuildingBlocks, signature_arguments
from metarl.tasks.candidate import load_function, normalise_source

BLOCK_TASKS = ("drift", "optimizer")


def term_proposals(task, source: str, name: str, seeds: range):
    """The `term` operator's proposals for `source`, one per rng seed."""
    proposer = MutationProposer(weights={"term": 1.0}, chain_probability=0.0)
    for seed in seeds:
        parents = [ParentInfo(id="p", code=source, name=name)]
        proposal = proposer.propose(ProposalRequest(task=task, parents=parents, rng_seed=seed))
        assert proposal.code is not None, proposal.failure
        yield proposal


def with_addition(source: str, task, addition: str, coefficient: float) -> str:
    """`source` with `coefficient * addition` added to its output, as the operator writes it."""
    tree = ast.parse(source)
    ret = tree.body[-1].body[-1]
    term = ast.parse(f"{coefficient!r} * ({addition})", mode="eval").body
    output = task.building_blocks.output
    if output is None:
        ret.value = ast.BinOp(left=ret.value, op=ast.Add(), right=term)
    else:
        ret.value.elts[output] = ast.BinOp(left=ret.value.elts[output], op=ast.Add(), right=term)
    return ast.unparse(tree)


@pytest.mark.parametrize("task_name", BLOCK_TASKS)
def test_every_addition_keeps_the_contract_on_every_seed_program(task_name):
    task = get_task(task_name)
    high = task.building_blocks.coefficient[1]
    for seed in task.seed_programs():
        for addition in task.building_blocks.additions:
            source = with_addition(seed.source, task, addition, high)
            report = task.probes(load_function(source, task.function_name), 7)
            assert report.ok, f"{seed.name} + {addition}: {report.reason}"


@pytest.mark.parametrize("task_name", BLOCK_TASKS)
def test_term_proposals_on_the_seed_programs_pass_the_probes(task_name):
    """Both edits (a swap where the program uses a term, an addition) keep the contract on the
    warm starts: log r, r - 1 and 1 - 1/r share value and slope at r = 1."""
    task = get_task(task_name)
    kinds = set()
    for seed in task.seed_programs():
        for proposal in term_proposals(task, seed.source, seed.name, range(8)):
            assert proposal.operator == "term" and proposal.thought.startswith("term: ")
            kinds.add("added" if "added" in proposal.thought else "swapped")
            assert normalise_source(proposal.code) != normalise_source(seed.source)
            report = task.probes(load_function(proposal.code, task.function_name), 7)
            assert report.ok, f"{proposal.thought}: {report.reason}"
    assert kinds == {"added", "swapped"}


def test_a_swap_reaches_the_ratio_deviations_lpo_does_not_use():
    """LPO writes r - 1 for positive advantages: swaps reach log r and 1 - 1/r there."""
    task = get_task("drift")
    lpo = task.seed_program("lpo")
    swapped = {
        proposal.thought.split("`")[3]
        for proposal in term_proposals(task, lpo.source, "lpo", range(60))
        if proposal.thought.startswith("term: `ratio - 1.0`")
    }
    assert swapped == {"jnp.log(ratio)", "1.0 - 1.0 / ratio"}


def test_terms_are_written_in_the_candidates_own_argument_names():
    task = get_task("drift")
    source = "def drift(r, adv, eps):\n    return jax.nn.relu((r - 1) * adv - eps) ** 2\n"
    swapped = set()
    for proposal in term_proposals(task, source, "renamed", range(20)):
        names = {n.id for n in ast.walk(ast.parse(proposal.code)) if isinstance(n, ast.Name)}
        assert not names & {"ratio", "advantage", "epsilon"}, proposal.code
        if proposal.thought.startswith("term: `r - 1`"):  # `r - 1` is the term `ratio - 1.0`
            swapped.add(proposal.thought.split("`")[3])
    assert swapped and swapped <= {"jnp.log(r)", "1.0 - 1.0 / r"}


def test_a_term_proposal_is_reproducible():
    task = get_task("optimizer")
    adam = task.seed_program("adam")
    first = [p.code for p in term_proposals(task, adam.source, "adam", range(5))]
    again = [p.code for p in term_proposals(task, adam.source, "adam", range(5))]
    assert first == again and len(set(first)) > 1


def test_a_task_without_building_blocks_never_picks_the_term_operator():
    task = get_task("value_loss")
    assert task.building_blocks is None
    parent = task.seed_programs()[0]
    proposer = MutationProposer()
    for seed in range(20):
        parents = [ParentInfo(id="p", code=parent.source)]
        proposal = proposer.propose(ProposalRequest(task=task, parents=parents, rng_seed=seed))
        assert "term" not in (proposal.operator or ""), proposal.thought


def test_building_blocks_refuse_a_group_of_one_and_a_bad_coefficient_range():
    with pytest.raises(ValueError, match="two terms"):
        BuildingBlocks(swaps=(("advantage",),), additions=())
    with pytest.raises(ValueError, match="coefficient"):
        BuildingBlocks(swaps=(), additions=("advantage",), coefficient=(0.0, 1.0))


def test_signature_arguments_reads_the_contracts_names():
    assert signature_arguments(get_task("drift").signature) == ("ratio", "advantage", "epsilon")
