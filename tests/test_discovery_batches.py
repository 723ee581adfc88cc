"""The loop's batch evaluation, run state and planning, in-process with a fake evaluator (no
sandbox, no training): seeds and each generation are one `evaluate_batch` call, children are
archived in slot order, an evaluator fault fails every child of its batch, an interrupted
generation resumes from its plan, and the stored state keeps the format older runs wrote."""

from __future__ import annotations

import hashlib
import json

import pytest

from metarl.archives import Archive
from metarl.discovery.config import DiscoverConfig
from metarl.discovery.loop import DiscoveryLoop
from metarl.discovery.proposers import PROPOSERS, make_proposer
from metarl.discovery.proposers.mutation import MutationProposer
from metarl.discovery.state import STATE_VERSION, RunState
from metarl.evaluation.outcome import Outcome
from metarl.tasks import get_task

SEEDS = {seed.source for seed in get_task("drift").seed_programs()}


class FakeEvaluator:
    """Scores a program by a hash of its source (+1 for a child with `children_win`, so that
    children beat the seeds); fails the `fail_at`-th batch with `error`."""

    def __init__(
        self,
        fail_at: int | None = None,
        error: BaseException | None = None,
        children_win: bool = False,
    ):
        self.batches: list[list[str]] = []
        self.fail_at, self.error = fail_at, error
        self.children_win = children_win
        self.closed = False

    def evaluate_batch(
        self, sources, task, known_fingerprints=None, progress=None, exclude_seeds=()
    ):
        self.batches.append(list(sources))
        if self.fail_at == len(self.batches):
            raise self.error
        out = []
        for source in sources:
            digest = hashlib.sha256(source.encode()).hexdigest()
            fitness = int(digest[:6], 16) / 0xFFFFFF
            if self.children_win and source not in SEEDS:
                fitness += 1.0
            out.append(Outcome(passed=True, stage="full", fitness=fitness, fingerprint=digest))
        return out

    def close(self):
        self.closed = True


def config(**changes) -> DiscoverConfig:
    base = dict(
        suite="smoke",
        timesteps=8192,
        seeds=1,
        seed_values=[0],
        max_time=None,
        islands=1,
        confirm=False,
    )
    return DiscoverConfig(**{**base, **changes})


def run_loop(path, evaluator, cfg, resume=None, events=None):
    with Archive(path) as archive:
        loop = DiscoveryLoop(
            archive,
            cfg,
            MutationProposer(),
            resume=resume,
            on_event=(lambda kind, data: events.append((kind, data)))
            if events is not None
            else None,
            evaluator_factory=lambda settings, workers: evaluator,
        )
        return loop.run()


def children(path, run_id="r1"):
    with Archive(path, must_exist=True) as archive:
        return [
            (r["id"], r["code"], r["status"], r["reason"], r["generation"], r["slot"])
            for r in archive.run_candidates(run_id)
            if not r["is_seed"]
        ]


def test_one_batch_per_generation_archived_in_slot_order(tmp_path):
    evaluator, events = FakeEvaluator(), []
    result = run_loop(tmp_path / "a.db", evaluator, config(budget=6, children=3), events=events)
    assert result.status == "finished" and result.candidates == 6
    assert [len(b) for b in evaluator.batches] == [2, 3, 3]  # the seeds, then 2 generations
    archived = [d["id"] for kind, d in events if kind == "candidate" and not d["is_seed"]]
    assert archived == [f"r1-{i}" for i in range(2, 8)]  # slot order
    assert evaluator.closed


def test_evaluator_fault_fails_every_child_of_the_batch(tmp_path):
    evaluator = FakeEvaluator(fail_at=2, error=RuntimeError("workers died"))
    result = run_loop(tmp_path / "a.db", evaluator, config(budget=3, children=3))
    assert result.status == "finished"
    rows = children(tmp_path / "a.db")
    evaluated = [r for r in rows if r[2] != "duplicate" and r[1] is not None]
    assert evaluated and all(
        r[2] == "fault"
        and r[3] == "internal evaluator error: the evaluator failed: RuntimeError: workers died"
        for r in evaluated
    )


def test_interrupted_generation_resumes_from_its_plan(tmp_path):
    cfg = config(budget=4, children=2)
    reference = tmp_path / "ref.db"
    run_loop(reference, FakeEvaluator(), cfg)
    path = tmp_path / "a.db"
    with pytest.raises(KeyboardInterrupt):
        run_loop(path, FakeEvaluator(fail_at=3, error=KeyboardInterrupt()), cfg)
    with Archive(path, must_exist=True) as archive:
        run = archive.get_run("r1")
        assert run["status"] == "interrupted" and run["state"]["plan"]["generation"] == 2
    result = run_loop(path, FakeEvaluator(), cfg, resume="r1")
    assert result.status == "finished"
    assert children(path) == children(reference)


def test_state_keeps_the_stored_format():
    stored = {
        "version": STATE_VERSION,
        "phase": "generations",
        "generation": 3,
        "next_seq": 9,
        "planned": 7,
        "islands": {"members": [["r1-0", "r1-4"]], "capacity": 6},
        "incumbent": "r1-4",
        "plan": {
            "generation": 4,
            "messages": [{"role": "user", "content": "hi"}],
            "slots": [
                {
                    "slot": 0,
                    "id": "r1-8",
                    "seq": 8,
                    "island": 0,
                    "parent_ids": ["r1-4"],
                    "inspiration_ids": ["r1-0"],
                    "rng_seed": 12345,
                    "proposal": {
                        "code": "def drift(ratio, advantage, epsilon):\n    return ratio * 0.0\n",
                        "name": "zero",
                        "thought": "",
                        "parent_ids": ["r1-4"],
                        "proposer": "llm:m",
                        "operator": "rewrite",
                        "failure": None,
                        "calls": [
                            {
                                "model": "m",
                                "prompt": [{"role": "user", "content": "p"}],
                                "reply": "r",
                                "prompt_tokens": 3,
                                "completion_tokens": 4,
                                "cost_usd": 0.5,
                                "latency_s": 1.0,
                                "error": None,
                            }
                        ],
                    },
                    "duplicate_of": None,
                    "retries": 1,
                }
            ],
        },
        "rng": {"bit_generator": "PCG64", "state": {"state": 1, "inc": 3}},
        "elapsed_s": 12.5,
        "cost_usd": 0.5,
        "proposer": {"rng": [1, 2]},
        "seed_ids": ["r1-0", "r1-1"],
        "seed_pool": [1822, 77, 90311, 5],
    }
    state = RunState.restore(json.loads(json.dumps(stored)))
    assert state.plan.slots[0].proposal.calls[0].cost_usd == 0.5
    assert state.plan.slots[0].cost_usd == 0.5
    assert json.dumps(state.to_dict(), sort_keys=True) == json.dumps(stored, sort_keys=True)
    fresh = RunState().to_dict()
    assert set(fresh) == set(stored) and fresh["plan"] is None and fresh["phase"] == "seeds"
    assert RunState.restore({}) is None and RunState.restore({"version": 0}) is None


def test_proposer_registry():
    assert set(PROPOSERS) == {"mutation", "llm"}
    assert PROPOSERS["llm"].needs_models and PROPOSERS["llm"].concurrent
    assert isinstance(make_proposer("mutation", config()), MutationProposer)
    with pytest.raises(KeyError):
        make_proposer("oracle", config())


def test_a_validation_round_that_scores_nothing_keeps_the_incumbent(tmp_path):
    # this fake scores no environment: a race cannot be decided, so nothing is replaced
    path, cfg = tmp_path / "a.db", config(budget=3, children=3, confirm=True)
    evaluator = FakeEvaluator(children_win=True)
    events = []
    run_loop(path, evaluator, cfg, events=events)
    assert [len(b) for b in evaluator.batches] == [2, 3, 2]  # seeds, children, one round
    incumbents = [d["incumbent"] for kind, d in events if kind == "generation"]
    assert incumbents in (["r1-0"], ["r1-1"])


def test_the_races_held_are_kept_in_the_state_so_a_resumed_race_keeps_its_number():
    state = RunState(races=["r1-7", "r1-12"])
    restored = RunState.restore(json.loads(json.dumps(state.to_dict())))
    assert restored.races == ["r1-7", "r1-12"]
    assert "races" not in RunState().to_dict()  # a run without races keeps its stored format


def test_contests_an_evaluator_fault_stopped_are_kept_in_the_state():
    voided = {"r1-6": {"incumbent": "r1-1", "attempts": 1}}
    restored = RunState.restore(json.loads(json.dumps(RunState(voided=voided).to_dict())))
    assert restored.voided == voided
    assert "voided" not in RunState().to_dict()  # a run without one keeps its stored format
