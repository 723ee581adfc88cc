"""The offline mutation proposer: validity, reproducibility, operators, crossover.

Validity is measured two ways: the cascade's static check (fast, hundreds of mutants per task)
and the task's probes (the cascade's stage 2) run in a separate process on a sample of mutants.
The rates are printed (run with -s to see them).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from metarl.discovery.proposers.base import ParentInfo, ProposalRequest
from metarl.discovery.proposers.mutation import DEFAULT_WEIGHTS, MutationProposer
from metarl.evaluation.static_check import check_task_source
from metarl.tasks import get_task
from metarl.tasks.candidate import normalise_source


def _parents(task, names):
    return [ParentInfo(id=n, code=task.seed_program(n).source, name=n) for n in names]


def _mutants(task_name: str, count: int, crossover_every: int = 5):
    task = get_task(task_name)
    names = [s.name for s in task.seed_programs()]
    proposer = MutationProposer()
    out = []
    for i in range(count):
        first = names[i % len(names)]
        chosen = [first]
        if crossover_every and i % crossover_every == 0 and len(names) > 1:
            chosen.append(names[(i + 1) % len(names)])
        request = ProposalRequest(task=task, parents=_parents(task, chosen), rng_seed=1000 + i)
        out.append((request, proposer.propose(request)))
    return task, out


@pytest.mark.parametrize("task_name", ["drift", "optimizer"])
def test_static_validity_rate(task_name):
    task, mutants = _mutants(task_name, 200)
    ok = 0
    for request, proposal in mutants:
        assert proposal.code is not None, proposal.failure
        assert normalise_source(proposal.code) != normalise_source(request.parents[0].code)
        assert proposal.thought and proposal.operator and proposal.name
        assert set(proposal.parent_ids) <= {p.id for p in request.parents}
        ok += check_task_source(proposal.code, task).ok
    rate = ok / len(mutants)
    print(f"\n{task_name}: static validity {rate:.1%} of {len(mutants)} mutants")
    assert rate >= 0.95


def test_reproducible_from_the_request_seed():
    task = get_task("drift")
    request = ProposalRequest(task=task, parents=_parents(task, ["lpo"]), rng_seed=42)
    first = MutationProposer().propose(request).code
    again = MutationProposer().propose(request).code
    assert first == again
    others = {
        MutationProposer()
        .propose(ProposalRequest(task=task, parents=request.parents, rng_seed=s))
        .code
        for s in range(20)
    }
    assert len(others) >= 12  # different seeds explore different programs


def test_all_operators_are_used():
    _, mutants = _mutants("drift", 300)
    kinds = Counter(p.operator.split("+")[0] for _, p in mutants)
    assert set(kinds) == {
        "constant",
        "function",
        "operator",
        "insert",
        "delete",
        "crossover",
        "family",
        "term",
    }


def test_crossover_grafts_the_donors_code():
    task = get_task("drift")
    grafted = 0
    for seed in range(30):
        request = ProposalRequest(
            task=task, parents=_parents(task, ["ppo_clip", "lpo"]), rng_seed=seed
        )
        proposal = MutationProposer().propose(request)
        if proposal.operator == "crossover":
            assert proposal.parent_ids == ["ppo_clip", "lpo"]
            # lpo's locals are inlined: the graft refers only to the arguments
            assert "log_ratio" not in proposal.code or "log_ratio =" in proposal.code
            grafted += any(k in proposal.code for k in ("tanh", "jnp.log(", "0.6", "2.0"))
    assert grafted >= 10


def test_contract_methods_and_failures():
    task = get_task("drift")
    proposer = MutationProposer()
    assert proposer.propose(ProposalRequest(task=task, parents=[])).code is None
    broken = ParentInfo(id="x", code="def drift(ratio, advantage, epsilon) return 1", name="x")
    failed = proposer.propose(ProposalRequest(task=task, parents=[broken]))
    assert failed.code is None and "parse" in failed.failure
    # a program with nothing to mutate fails cleanly, with a reason
    bare = ParentInfo(id="y", code="def drift(ratio, advantage, epsilon):\n    pass\n", name="y")
    # (with edits only: the `family` operator would replace it with a family member)
    edits = MutationProposer(weights={k: w for k, w in DEFAULT_WEIGHTS.items() if k != "family"})
    nothing = edits.propose(ProposalRequest(task=task, parents=[bare]))
    assert nothing.code is None and "no valid edit" in nothing.failure
    proposer.propose(ProposalRequest(task=task, parents=_parents(task, ["lpo"]), rng_seed=1))
    state = json.loads(json.dumps(proposer.get_state()))
    fresh = MutationProposer()
    fresh.set_state(state)
    assert fresh.get_state() == state
    assert proposer.drain_messages() == []
    proposer.restore_messages([{"role": "user", "content": "x"}])


PROBE_SCRIPT = textwrap.dedent("""
    import json, sys
    from metarl.tasks import get_task
    from metarl.tasks.candidate import load_function
    from metarl.tasks.probing import fingerprint
    task = get_task(sys.argv[1])
    out = []
    for source in json.load(sys.stdin):
        try:
            fn = load_function(source, task.function_name)
            report = task.probes(fn, 0)
            fp = fingerprint(fn, task.fingerprint_inputs()) if report.ok else None
            out.append([report.ok, report.reason, fp])
        except Exception as error:
            out.append([False, f"{type(error).__name__}: {error}", None])
    json.dump(out, sys.stdout)
""")


def _probe(task_name: str, sources: list[str]) -> list:
    # Generated programs run in a child process, never in the test process (as in the loop).
    proc = subprocess.run(
        [sys.executable, "-c", PROBE_SCRIPT, task_name],
        input=json.dumps(sources),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _probe_validity(task_name: str, count: int) -> float:
    task, mutants = _mutants(task_name, count)
    sources = [p.code for _, p in mutants]
    results = _probe(task_name, sources)
    parents = _probe(task_name, [s.source for s in task.seed_programs()])
    parent_prints = {r[2] for r in parents}
    ok = sum(1 for r in results if r[0])
    same = sum(1 for r in results if r[0] and r[2] in parent_prints)
    reasons = Counter((r[1] or "")[:60] for r in results if not r[0])
    by_op = Counter()
    for (_, proposal), r in zip(mutants, results):
        by_op[(proposal.operator.split("+")[0], bool(r[0]))] += 1
    print(
        f"\n{task_name}: probe validity {ok / count:.1%} of {count} mutants; "
        f"{same} behave exactly like a seed; by operator {dict(sorted(by_op.items()))}; "
        f"top failures {reasons.most_common(3)}"
    )
    return ok / count


def test_probe_validity_rate_drift():
    assert _probe_validity("drift", 60) >= 0.6


@pytest.mark.long  # ~160 s in .ci/run on 2 cores; the drift task's rate stays in the fast tier
def test_probe_validity_rate_optimizer():
    assert _probe_validity("optimizer", 100) >= 0.5


def test_a_failed_crossover_falls_back_to_an_edit_never_to_a_family_draw():
    """A donor with nothing to transplant (its body is names only): the proposer edits the
    first parent instead, with an operator that edits (a `family` draw would replace the
    parent, and the editor has no such edit)."""
    task = get_task("drift")
    donor = ParentInfo(id="d", code="def drift(ratio, advantage, epsilon):\n    return ratio\n")
    seen = Counter()
    for seed in range(40):
        parents = [*_parents(task, ["ppo_clip"]), donor]
        proposal = MutationProposer().propose(
            ProposalRequest(task=task, parents=parents, rng_seed=seed)
        )
        assert proposal.code is not None, proposal.failure
        assert proposal.parent_ids == ["ppo_clip"]
        seen[proposal.operator.split("+")[0]] += 1
    assert "family" not in seen and "crossover" not in seen and len(seen) >= 4
