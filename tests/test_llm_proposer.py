"""The LLM proposer, population and conversation modes, against a real local HTTP server:
prompts and feedback, the repair round-trip, diffs and their fallback, crossover, history
summarisation, and resuming a conversation from archived messages."""

from __future__ import annotations

import json

import pytest
from llm_server import Reply, ScriptedLLMServer

from metarl.discovery.proposers.base import ParentInfo, ProposalRequest
from metarl.discovery.proposers.llm import LLMConfigError, build_llm_proposer
from metarl.evaluation.outcome import EnvScore, Outcome
from metarl.tasks import get_task

TASK = get_task("drift")
PPO = TASK.seed_program("ppo_clip").source
LPO = TASK.seed_program("lpo").source


def env_score(normalised, mean):
    return EnvScore(
        env="CartPole-v1",
        seeds=[0, 1],
        total_timesteps=50_000,
        returns=[mean - 5, mean + 5],
        mean=mean,
        std=5.0,
        normalised=normalised,
        baseline_mean=400.0,
        random_mean=20.0,
        curve=[20.0, 100.0, 200.0, 300.0, mean],
    )


def passed(fitness):
    return Outcome(
        passed=True,
        stage="full",
        fitness=fitness,
        env_scores=[env_score(fitness, 20 + 380 * fitness)],
    )


def failed(stage, reason):
    return Outcome.failure(stage, reason)


PARENT = ParentInfo(id="c-ppo", code=PPO, name="ppo_clip", fitness=1.0, outcome=passed(1.0))
OTHER = ParentInfo(id="c-lpo", code=LPO, name="lpo", fitness=1.05, outcome=passed(1.05))


def request(parents=(PARENT,), rng_seed=0, best=None):
    return ProposalRequest(
        task=TASK, parents=list(parents), inspirations=[], best=best, rng_seed=rng_seed
    )


def reply(code, name="idea", thought="because"):
    return json.dumps({"thought": thought, "name": name, "code": code})


def proposer(server, **options):
    options.setdefault("timeout_s", 10)
    return build_llm_proposer(
        {"models": ["openai/scripted"], "api_base": server.api_base, **options}
    )


@pytest.fixture
def server():
    with ScriptedLLMServer() as s:
        yield s


# -- population ------------------------------------------------------------------------------
def test_population_rewrite(server):
    p = proposer(server, edit_forms={"rewrite": 1.0})
    result = p.propose(request())
    assert result.code and "excess ** 2" in result.code
    assert (result.name, result.operator, result.proposer) == (
        "quadratic_trust",
        "rewrite",
        "llm:openai/scripted",
    )
    assert result.parent_ids == ["c-ppo"] and len(result.calls) == 1
    system, user = server.requests[0]["messages"]
    assert TASK.contract.strip()[:200] in system["content"] and '"thought"' in system["content"]
    assert PPO.strip() in user["content"]  # the parent's code ...
    assert (
        "CartPole-v1" in user["content"] and "normalised 1.000" in user["content"]
    )  # ... and results


def test_repair_round_trip(server):
    truncated = reply(PPO.replace("relu", "softplus"))[:-30]
    server.push(truncated, reply(PPO.replace("relu", "softplus")))
    result = proposer(server, edit_forms={"rewrite": 1.0}).propose(request())
    assert result.code and "softplus" in result.code and len(result.calls) == 2
    second = server.requests[1]["messages"]
    assert second[-2] == {"role": "assistant", "content": truncated}
    assert "cut off" in second[-1]["content"]


def test_unrepairable_reply_fails_with_reason(server):
    server.push("I'm sorry, I cannot help with that.", "Still no code, sorry.")
    result = proposer(server).propose(request())
    assert result.code is None and "no usable program" in result.failure
    assert len(result.calls) == 2 and all(c.reply for c in result.calls)


def test_llm_fault_is_a_recorded_failure(server):
    server.push(*[Reply(status=500)] * 3)
    result = proposer(server, max_retries=2).propose(request())
    assert result.code is None and "LLM call failed" in result.failure and "500" in result.failure
    assert len(result.calls) == 1 and result.calls[0].error


def test_empty_reply_is_asked_again(server):
    server.push(Reply(empty=True))
    result = proposer(server).propose(request())
    assert result.code and len(result.calls) == 2
    assert server.requests[0]["messages"] == server.requests[1]["messages"]


def diff_reply(search, replace, extra_code=None):
    diff = f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE"
    obj = {"thought": "soften", "name": "soft_clip", "diff": diff}
    if extra_code:
        obj["code"] = extra_code
    return json.dumps(obj)


def test_diff_applies_to_parent(server):
    server.push(
        diff_reply(
            "    return jax.nn.relu((ratio - clipped_ratio) * advantage)",
            "    return jax.nn.softplus((ratio - clipped_ratio) * advantage) - jnp.log(2.0)",
        )
    )
    result = proposer(server, edit_forms={"diff": 1.0}).propose(request())
    assert result.operator == "diff" and result.name == "soft_clip"
    assert "softplus" in result.code and "clipped_ratio = jnp.clip" in result.code
    assert "SEARCH" in server.requests[0]["messages"][1]["content"]


def test_diff_tolerates_indentation_drift(server):
    server.push(
        diff_reply(
            "return jax.nn.relu((ratio - clipped_ratio) * advantage)",
            "return 0.5 * jax.nn.relu((ratio - clipped_ratio) * advantage) ** 2",
        )
    )
    result = proposer(server, edit_forms={"diff": 1.0}).propose(request())
    assert result.operator == "diff" and "    return 0.5 *" in result.code


def test_diff_that_does_not_apply_falls_back(server):
    # the same reply also carries full code: used as a rewrite
    server.push(
        diff_reply(
            "    return something_else", "    return 0", extra_code=PPO.replace("relu", "gelu")
        )
    )
    result = proposer(server, edit_forms={"diff": 1.0}).propose(request())
    assert result.operator == "rewrite" and "gelu" in result.code and len(result.calls) == 1
    # no full code: one repair round-trip asking for the complete program
    server.push(
        diff_reply("    return something_else", "    return 0"), reply(PPO.replace("relu", "elu"))
    )
    result = proposer(server, edit_forms={"diff": 1.0}).propose(request(rng_seed=1))
    assert result.operator == "rewrite" and "elu" in result.code and len(result.calls) == 2
    repair = server.requests[-1]["messages"][-1]["content"]
    assert "does not match" in repair and "complete program" in repair


def test_crossover_of_two_parents(server):
    result = proposer(server).propose(request(parents=(PARENT, OTHER)))
    assert result.operator == "crossover" and result.parent_ids == ["c-ppo", "c-lpo"]
    user = server.requests[0]["messages"][1]["content"]
    assert "Parent A" in user and "Parent B" in user and PPO.strip() in user and LPO.strip() in user


def test_ensemble_choice_recorded(server):
    p = build_llm_proposer(
        {"models": ["openai/big:1", "openai/small:1"], "api_base": server.api_base, "rng_seed": 3}
    )
    models = {p.propose(request(rng_seed=s)).proposer for s in range(8)}
    assert models == {"llm:openai/big", "llm:openai/small"}
    assert {r["model"] for r in server.requests} == {"big", "small"}


def test_options_are_validated():
    with pytest.raises(LLMConfigError, match="model"):
        build_llm_proposer({})
    with pytest.raises(LLMConfigError, match="mode"):
        build_llm_proposer({"models": ["openai/x"], "mode": "chat"})
    with pytest.raises(LLMConfigError, match="unknown"):
        build_llm_proposer({"models": ["openai/x"], "colour": "blue"})


# -- conversation ----------------------------------------------------------------------------
def numbered_replies(payload):
    """Each reply a distinct valid drift, numbered by how many assistant turns came before."""
    n = sum(m["role"] == "assistant" for m in payload["messages"])
    return reply(PPO.replace("return", f"scale = {n + 1}.0\n    return scale *"), name=f"v{n + 1}")


def run_rounds(p, outcomes, start=0):
    archived, sent = [], []
    for i, outcome in enumerate(outcomes, start=start):
        result = p.propose(request(rng_seed=i, best=OTHER))
        p.feedback(result, outcome, f"cand-{i}")
        archived += p.drain_messages()
        sent.append(result.calls[-1].prompt if result.calls else None)
    return archived, sent


def test_conversation_grows_with_rich_feedback():
    with ScriptedLLMServer(responder=numbered_replies) as server:
        p = proposer(server, mode="conversation")
        archived, sent = run_rounds(
            p, [passed(0.8), failed("probes", "drift is negative at ratio=0.5"), passed(1.2)]
        )
    assert [m["role"] for m in archived] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert len(sent[2]) == 6  # system, opening, (reply, feedback) x 2
    first_feedback = archived[3]["content"]
    assert (
        "cand-0" in first_feedback
        and "CartPole-v1" in first_feedback
        and "normalised 0.800" in first_feedback
    )
    assert "Best so far: `lpo` with 1.050" in first_feedback
    second_feedback = archived[5]["content"]
    assert (
        "FAILED at stage `probes`" in second_feedback
        and "drift is negative at ratio=0.5" in second_feedback
    )
    third_feedback = archived[7]["content"]
    assert "This is the best program so far." in third_feedback
    assert "Compared with your previous program `v2`: it had no score" in third_feedback
    assert (
        "Compared with your previous program `v1` (0.800): +0.000" in second_feedback
        or "Compared with your previous program `v1`: it had fitness 0.800" in second_feedback
    )


def test_conversation_history_is_summarised_past_the_budget():
    with ScriptedLLMServer(responder=numbered_replies) as server:
        p = proposer(server, mode="conversation", history_token_budget=1900)
        archived, sent = run_rounds(
            p, [passed(0.9), passed(1.3), passed(0.7), passed(1.1), passed(1.0)]
        )
    restarts = [i for i, m in enumerate(archived) if m["role"] == "system"]
    assert len(restarts) >= 2  # the opening, and at least one restart
    summary = archived[restarts[1] + 1]["content"]
    assert "condensed record" in summary and "scale = 2.0" in summary  # the best (1.3) program
    assert "Your most recent attempt" in summary
    assert max(len(s) for s in sent) >= 4  # a real dialogue before the restart
    # the restart shrinks what is sent: some request carries fewer messages than the one before
    assert any(len(later) < len(earlier) for earlier, later in zip(sent, sent[1:]))


def test_conversation_resumes_from_archived_messages():
    outcomes = [passed(0.9), failed("short", "return far below the seed"), passed(1.1)]
    with ScriptedLLMServer(responder=numbered_replies) as server:
        straight = proposer(server, mode="conversation")
        _, sent_straight = run_rounds(straight, outcomes)

        first = proposer(server, mode="conversation")
        archived, _ = run_rounds(first, outcomes[:2])
        state = json.loads(json.dumps(first.get_state()))  # as stored in the archive

        resumed = proposer(server, mode="conversation")
        resumed.set_state(state)
        resumed.restore_messages(archived)
        _, sent_resumed = run_rounds(resumed, outcomes[2:], start=2)
    assert sent_resumed[0] == sent_straight[2]


def test_conversation_unusable_reply_is_told_and_continues():
    with ScriptedLLMServer(["no code here", "still none"]) as server:
        p = proposer(server, mode="conversation")
        result = p.propose(request())
        assert result.code is None
        p.feedback(result, failed("static", result.failure), "cand-x")
        messages = p.drain_messages()
        assert messages[-1]["role"] == "user" and "could not be used" in messages[-1]["content"]
        result = p.propose(request(rng_seed=1))
        assert result.code is not None
        assert server.requests[-1]["messages"][-1]["content"] == messages[-1]["content"]


def test_conversation_resume_mid_generation_then_feedback():
    """The loop drains messages right after proposing (kept in the run's plan) and archives them
    after feedback; a process killed in between resumes with archive + plan messages and the
    saved state, then gives the pending feedback."""
    with ScriptedLLMServer(responder=numbered_replies) as server:
        first = proposer(server, mode="conversation")
        archived, _ = run_rounds(first, [passed(0.9)])
        pending = first.propose(request(rng_seed=1, best=OTHER))
        plan_messages = first.drain_messages()
        state = json.loads(json.dumps(first.get_state()))

        resumed = proposer(server, mode="conversation")
        resumed.restore_messages(archived + plan_messages)
        resumed.set_state(state)
        resumed.feedback(pending, passed(1.4), "cand-1")
        feedback = resumed.drain_messages()
        assert len(feedback) == 1 and "cand-1" in feedback[0]["content"]
        assert "Propose the next program" in feedback[0]["content"]
        assert "+0.500" in feedback[0]["content"]  # compared with cand-0 (0.9)
        resumed.propose(request(rng_seed=2, best=OTHER))
        assert len(server.requests[-1]["messages"]) == 6


def test_conversation_duplicate_is_told_on_repropose():
    with ScriptedLLMServer(responder=numbered_replies) as server:
        p = proposer(server, mode="conversation")
        p.propose(request(rng_seed=0))
        p.propose(request(rng_seed=1))  # the loop re-asks: the first program was a duplicate
        assert "not evaluated" in server.requests[-1]["messages"][-1]["content"]


def test_fresh_program_without_parents(server):
    result = proposer(server).propose(request(parents=(), best=OTHER))
    assert result.operator == "fresh" and result.code and result.parent_ids == []
    user = server.requests[0]["messages"][1]["content"]
    assert "Best program so far: `lpo`" in user and "Write a new `drift`" in user
