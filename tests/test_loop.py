"""The discovery loop against the real sandboxed cascade, at the tiniest budget.

Seeds come from a session-wide archive template (evaluated once), so each test pays only for
its own children. Scripted proposers stand in for an LLM to exercise failure handling and the
conversation bookkeeping; evaluation is always the real cascade.
"""

from __future__ import annotations

import pytest

from metarl.archives import Archive
from metarl.discovery.config import DiscoverConfig
from metarl.discovery.loop import DiscoveryLoop
from metarl.discovery.proposers.base import LLMCall, Proposal
from metarl.tasks import get_task

PPO = get_task("drift").seed_program("ppo_clip").source


def tiny_config(**changes) -> DiscoverConfig:
    base = dict(
        suite="smoke",
        timesteps=8192,
        seeds=1,
        seed_values=[0],
        max_time=None,
        islands=1,
        confirm=False,
    )
    base.update(changes)
    return DiscoverConfig(**base)


class ScriptedProposer:
    """Answers each request with the next scripted item (a Proposal, or an exception to raise)
    and keeps a dialogue like a conversational LLM proposer would."""

    name = "scripted"

    def __init__(self, script):
        self.script = list(script)
        self.feedbacks = []
        self.undrained = []
        self.restored = None

    def propose(self, request):
        item = self.script.pop(0)
        self.undrained += [
            {"role": "user", "content": f"request gen {request.generation}"},
            {"role": "assistant", "content": f"reply {len(self.feedbacks)}"},
        ]
        if isinstance(item, Exception):
            raise item
        return item

    def feedback(self, proposal, outcome, candidate_id):
        self.feedbacks.append((candidate_id, outcome.stage, outcome.reason))
        self.undrained.append(
            {"role": "user", "content": f"feedback on {candidate_id}: {outcome.stage}"}
        )

    def get_state(self):
        return {"left": len(self.script)}

    def set_state(self, state):
        pass

    def drain_messages(self):
        drained, self.undrained = self.undrained, []
        return drained

    def restore_messages(self, messages):
        self.restored = messages


def test_proposer_failures_costs_and_dedup(seeded_archive, metarl_cache):
    script = [
        RuntimeError("API down"),
        Proposal(
            code=None,
            failure="no code block in the reply",
            calls=[
                LLMCall(
                    model="m",
                    prompt=[{"role": "user", "content": "p"}],
                    reply="sorry",
                    prompt_tokens=12,
                    completion_tokens=3,
                    cost_usd=None,
                )
            ],
        ),
        Proposal(code="# same program, other comment\n" + PPO, name="copy"),
        Proposal(
            code="import os\ndef drift(ratio, advantage, epsilon):\n    return os.getcwd()\n",
            calls=[LLMCall(model="m", prompt=[], reply="x", cost_usd=0.25, latency_s=1.5)],
        ),
        Proposal(code=123),
    ]
    proposer = ScriptedProposer(script)
    config = tiny_config(budget=10, children=5, dedup_retries=0, max_cost=0.2, proposer="mutation")
    with Archive(seeded_archive) as archive:
        result = DiscoveryLoop(archive, config, proposer).run()
        assert result.status == "stopped" and "cost budget" in result.reason
        rows = {r["seq"]: r for r in archive.run_candidates(result.run_id)}
        assert rows[2]["status"] == "no_code" and "API down" in rows[2]["reason"]
        assert rows[3]["status"] == "no_code" and rows[3]["reason"] == "no code block in the reply"
        assert rows[4]["status"] == "duplicate" and rows[4]["duplicate_of"] == f"{result.run_id}-1"
        assert rows[5]["status"] == "failed" and rows[5]["stage"] == "static"
        assert rows[6]["status"] == "no_code" and "not text" in rows[6]["reason"]
        # calls archived and linked; unknown cost stays unknown; the run's cost sums known ones
        assert (
            rows[3]["prompt_id"] and rows[3]["cost_usd"] is None and rows[3]["prompt_tokens"] == 12
        )
        assert archive.calls(rows[5]["id"])[0]["cost_usd"] == 0.25
        assert archive.get_run(result.run_id)["cost_usd"] == 0.25
        # feedback once per proposal, in slot order; messages archived after it
        assert [f[0] for f in proposer.feedbacks] == [rows[s]["id"] for s in range(2, 7)]
        messages = archive.messages(result.run_id)
        assert len(messages) == 15
        assert (
            messages[-1]["content"]
            == f"feedback on {proposer.feedbacks[-1][0]}: {proposer.feedbacks[-1][1]}"
        )
        assert archive.integrity_check() == "ok"


def test_conversation_mode_one_at_a_time_and_resume_messages(seeded_archive, metarl_cache):
    script = [Proposal(code=None, failure=f"nothing {i}") for i in range(3)]
    proposer = ScriptedProposer(script)
    config = tiny_config(budget=2, mode="conversation", children=4, islands=3)
    with Archive(seeded_archive) as archive:
        result = DiscoveryLoop(archive, config, proposer).run()
        assert result.status == "finished"
        rows = [r for r in archive.run_candidates(result.run_id) if not r["is_seed"]]
        assert [r["generation"] for r in rows] == [1, 2]  # one candidate per generation
        messages = archive.messages(result.run_id)
        assert [m["role"] for m in messages] == ["user", "assistant", "user"] * 2
        # resuming hands the archived dialogue back to the proposer, in order
        again = ScriptedProposer(script[2:])
        DiscoveryLoop(
            archive,
            config.__class__(**{**config.to_dict(), "budget": 3}),
            again,
            resume=result.run_id,
        ).run()
        assert [m["content"] for m in again.restored] == [m["content"] for m in messages]
        assert archive.get_run(result.run_id)["candidates_count"] == 3


@pytest.mark.slow
def test_concurrent_workers(seeded_archive, metarl_cache):
    """Two evaluations at a time: every child archived once, in consistent state."""
    config = tiny_config(budget=4, children=4, workers=2, islands=2)
    from metarl.discovery.proposers.mutation import MutationProposer

    with Archive(seeded_archive) as archive:
        result = DiscoveryLoop(archive, config, MutationProposer()).run()
        assert result.status == "finished" and result.candidates == 4
        children = [r for r in archive.run_candidates(result.run_id) if not r["is_seed"]]
        assert sorted(r["slot"] for r in children) == [0, 1, 2, 3]
        assert all(r["status"] == "passed" or r["reason"] for r in children)
        assert archive.integrity_check() == "ok"


def test_two_runs_share_one_archive_concurrently(seeded_archive, metarl_cache):
    """Two runs write the same file at the same time (separate connections): ids never collide,
    both finish, the file stays intact. Their proposers fail without code, so nothing trains."""
    import threading

    results, errors = {}, []

    def run(name):
        try:
            proposer = ScriptedProposer(
                [Proposal(code=None, failure=f"{name} {i}") for i in range(6)]
            )
            with Archive(seeded_archive) as archive:
                results[name] = DiscoveryLoop(
                    archive, tiny_config(budget=6, children=2), proposer
                ).run()
        except Exception as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert {r.run_id for r in results.values()} == {"r2", "r3"}
    with Archive(seeded_archive) as archive:
        for result in results.values():
            rows = archive.run_candidates(result.run_id)
            assert len([r for r in rows if not r["is_seed"]]) == 6
            assert archive.get_run(result.run_id)["status"] == "finished"
        assert archive.integrity_check() == "ok"
