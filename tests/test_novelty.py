"""Near-duplicates are rejected before training: a proposal whose normalised code is nearly an
archived program's is re-asked (and settled at stage "dedup" if it stays one), and a candidate
whose outputs on the probe batch are within `behaviour_novelty` of an archived candidate's
stops after the probes; both are counted as evaluations saved, across a resume.

The loop tests use a counting fake evaluator (no sandbox, no training): what matters there is
which programs reach the evaluator. The behaviour test runs the real sandboxed cascade on the
`smoke` suite at the tiniest budget, as tests/test_cascade.py does.
"""

from __future__ import annotations

import hashlib
import json
import math
import re

import numpy as np
import pytest
from llm_server import ScriptedLLMServer

from metarl.archives import Archive
from metarl.archives.incumbents import run_summary
from metarl.archives.queries import leaderboard
from metarl.cli.board import fate_text
from metarl.cli.console import console
from metarl.cli.progress import print_run_report
from metarl.discovery.config import ConfigError, DiscoverConfig
from metarl.discovery.loop import DiscoveryLoop
from metarl.discovery.novelty import (
    CodeIndex,
    nearest,
    normalised_tokens,
    similarity,
    summary_line,
)
from metarl.discovery.proposers.base import ParentInfo, Proposal, ProposalRequest
from metarl.discovery.proposers.llm import build_llm_proposer
from metarl.discovery.proposers.mutation import MutationProposer
from metarl.discovery.records import candidate_event
from metarl.evaluation.cascade import CascadeSettings, Evaluator
from metarl.evaluation.near_duplicates import (
    BEHAVIOUR_SIZE,
    behaviour_descriptor,
    behaviour_distance,
    is_near,
    near_reason,
    nearest_behaviour,
)
from metarl.evaluation.outcome import MalformedResult, Outcome, parse_outcome
from metarl.report.story import header_of
from metarl.tasks import get_task
from metarl.tasks.candidate import load_function
from metarl.tasks.probing import fingerprint_outputs, probe_outputs

DRIFT = get_task("drift")
PPO = DRIFT.seed_program("ppo_clip").source
PPO_ID = "r1-1"  # the seeds are archived in name order: lpo, ppo_clip
DEFAULT = DiscoverConfig().code_novelty


def renamed_ppo(tag: int = 0) -> str:
    """PPO's clip with other names, comments, a docstring, ints for floats, another layout."""
    return (
        f"# attempt {tag}: a fresh take on the trust region\n"
        f"def drift(r{tag}, adv, eps):\n"
        '    """Clip the ratio, penalise what leaves the region."""\n'
        f"    inside = jnp.clip(r{tag}, 1 - eps, 1 + eps)  # the clipped ratio\n"
        f"    return jax.nn.relu(\n        (r{tag} - inside) * adv\n    )\n"
    )


def novel(seed: int, twin: bool = False) -> str:
    """A program that is no near-duplicate of PPO or of another `novel` (a distinct scale)."""
    scale = 1.0 + (seed % 997) / 1000
    marker = "    # twin\n" if twin else ""
    return (
        "def drift(ratio, advantage, epsilon):\n"
        f"{marker}"
        "    clipped_ratio = jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)\n"
        f"    return jax.nn.relu((ratio - clipped_ratio) * advantage) * {scale}\n"
    )


# -- code: the normalised form and the similarity ------------------------------------------
def test_renaming_locals_and_reformatting_keeps_similarity_one():
    assert similarity(PPO, renamed_ppo(3)) == 1.0
    assert normalised_tokens(PPO) == normalised_tokens(renamed_ppo(7))


def test_a_different_formula_is_clearly_less_similar():
    different = (
        "def drift(ratio, advantage, epsilon):\n"
        "    return jnp.square(jnp.log(ratio)) * jnp.abs(advantage) / (2.0 * epsilon)\n"
    )
    assert similarity(PPO, different) < 0.6
    assert similarity(PPO, PPO.replace("relu", "softplus")) < DEFAULT


@pytest.mark.parametrize("task", ["drift", "optimizer"])
def test_the_seed_programs_are_not_near_duplicates_of_each_other(task):
    seeds = get_task(task).seed_programs()
    for first in seeds:
        for second in seeds:
            if first.name != second.name:
                assert similarity(first.source, second.source) < min(DEFAULT, 0.6)


@pytest.mark.parametrize("task", ["drift", "optimizer"])
def test_one_mutation_of_a_seed_is_never_a_near_duplicate_at_the_default(task):
    """How the default was chosen: the default proposer's one-edit children of every seed
    (a changed constant in a 133-token Adam is 0.993 similar) stay below it."""
    proposer, found = MutationProposer(chain_probability=0.0), 0
    for seed in get_task(task).seed_programs():
        parent = ParentInfo(id="p", code=seed.source)
        for rng_seed in range(30):
            request = ProposalRequest(task=get_task(task), parents=[parent], rng_seed=rng_seed)
            child = proposer.propose(request)
            if child.code is not None:
                found += 1
                assert similarity(seed.source, child.code) < DEFAULT, child.code
    assert found >= 40


def test_unparseable_code_is_compared_as_raw_text():
    broken = "def drift(ratio, advantage, epsilon:\n    return ratio\n"
    assert similarity(broken, broken.replace("    ", "\t")) == 1.0
    assert similarity(broken, broken.replace("return ratio", "return advantage")) < 1.0
    assert 0.0 < similarity(broken, PPO) < 0.5


def test_nearest_finds_the_most_similar_archived_program_earliest_first():
    archived = {"a": novel(1), "b": PPO, "c": renamed_ppo(1)}
    assert nearest(renamed_ppo(2), archived) == ("b", 1.0)
    assert nearest(PPO, {}) == (None, 0.0)
    assert nearest(novel(500), {"b": PPO}, at_least=DEFAULT) == (None, 0.0)
    index = CodeIndex(archived)
    index.add("d", novel(2))
    assert index.nearest(novel(2), at_least=DEFAULT) == ("d", 1.0)
    assert len(index) == 4


def test_config_checks_the_thresholds():
    with pytest.raises(ConfigError):
        DiscoverConfig(code_novelty=1.5).resolved()
    with pytest.raises(ConfigError):
        DiscoverConfig(behaviour_novelty=-1.0).resolved()


# -- behaviour: the descriptor and its distance ----------------------------------------------
def test_the_descriptor_is_small_fixed_and_squashes_huge_values():
    outputs = probe_outputs(load_function(PPO, "drift"), DRIFT.fingerprint_inputs())
    assert np.asarray(outputs).size > BEHAVIOUR_SIZE
    descriptor = behaviour_descriptor(outputs)
    assert len(descriptor) == BEHAVIOUR_SIZE
    assert descriptor == behaviour_descriptor(outputs)  # fixed: no randomness
    small = behaviour_descriptor(np.array([0.0, -1.0, 1e6]))
    assert small == pytest.approx([0.0, -math.log(2.0), math.log1p(1e6)])
    # a huge value does not hide a difference elsewhere
    assert (
        behaviour_distance(
            behaviour_descriptor(np.array([1e30, 1.0])), behaviour_descriptor(np.array([1e30, 2.0]))
        )
        > DiscoverConfig().behaviour_novelty
    )


def test_nan_and_inf_outputs_never_match_and_never_raise():
    bad = behaviour_descriptor(np.array([math.nan, math.inf, -math.inf, 1.0]))
    assert math.isnan(bad[0]) and bad[1] == math.inf and bad[2] == -math.inf
    good = behaviour_descriptor(np.array([0.5, 1.0, 2.0, 3.0]))
    assert behaviour_distance(bad, bad) == math.inf
    assert behaviour_distance(bad, good) == math.inf
    assert nearest_behaviour(bad, {"a": bad, "b": good}) is None
    garbage = {
        "nan": bad,
        "null": [None, 1.0, 2.0, 3.0],  # how the archive stores a NaN
        "text": ["x", 1.0, 2.0, 3.0],
        "short": good[:2],
        "scalar": 3.0,
        "empty": [],
        "object": {"a": 1},
        "flag": [True, False, True, False],
    }
    assert nearest_behaviour(good, garbage) is None
    assert nearest_behaviour(good, {**garbage, "same": list(good)}) == ("same", 0.0)
    for value in garbage.values():
        assert behaviour_distance(good, value) == math.inf
    assert behaviour_distance([0.0, 0.0], [0.0, 0.0]) == 0.0
    # through the result channel: NaN becomes null, which parses and still never matches
    outcome = Outcome(passed=False, stage="probes", reason="r", behaviour=bad)
    message = json.loads(json.dumps(outcome.to_dict()))
    assert message["behaviour"][:3] == [None, None, None]
    parsed = parse_outcome(message)
    assert nearest_behaviour(parsed.behaviour, {"a": good}) is None
    with pytest.raises(MalformedResult):
        parse_outcome({**message, "behaviour": [1.0] * (BEHAVIOUR_SIZE + 1)})
    with pytest.raises(MalformedResult):
        parse_outcome({**message, "behaviour": ["1.0"]})


SMOKE = dict(
    suite="smoke",
    seeds=1,
    seed_values=[0],
    total_timesteps=4500,
    short_timesteps=4096,
    timeout_s=60,
    probe_seed=0,
)
SCALED = PPO.replace(
    "return jax.nn.relu((ratio - clipped_ratio) * advantage)",
    "return jax.nn.relu((ratio - clipped_ratio) * advantage) * 1.00001",
)


def test_a_behavioural_near_duplicate_is_rejected_before_any_training(metarl_cache):
    """The real cascade: a program 1e-5 away from an archived one in what it computes (a
    different fingerprint: the exact check alone lets it through) stops after the probes."""
    assert SCALED != PPO
    inputs = DRIFT.fingerprint_inputs()
    archived = probe_outputs(load_function(PPO, "drift"), inputs)
    scaled = probe_outputs(load_function(SCALED, "drift"), inputs)
    assert fingerprint_outputs(archived) != fingerprint_outputs(scaled)
    descriptor = behaviour_descriptor(archived)
    assert behaviour_distance(descriptor, behaviour_descriptor(scaled)) < 1e-4
    known = {
        "r1-0": [None] * BEHAVIOUR_SIZE,  # NaN outputs, as archived: never a match
        "r1-2": ["garbage"],
        PPO_ID: descriptor,
    }
    stages = []
    with Evaluator(CascadeSettings(**SMOKE), workers=1, prewarm=False) as evaluator:
        [outcome] = evaluator.evaluate_batch(
            [SCALED],
            "drift",
            known_fingerprints={fingerprint_outputs(archived): PPO_ID},
            progress=lambda index, stage: stages.append(stage),
            known_behaviours=known,
        )
    assert not outcome.passed and outcome.stage == "probes", outcome.reason
    assert outcome.duplicate_of == PPO_ID
    near = re.match(rf"behaves within (\S+) of candidate {PPO_ID} \(", outcome.reason)
    assert near and 0 < float(near.group(1)) < 1e-4, outcome.reason
    assert is_near(outcome.stage, outcome.duplicate_of, outcome.reason)
    assert "short" not in stages and "full" not in stages  # never trained
    assert not outcome.env_scores and "compile" not in outcome.timings
    assert outcome.fingerprint == fingerprint_outputs(scaled)
    assert len(outcome.behaviour) == BEHAVIOUR_SIZE


# -- the loop: re-asked, settled, counted ------------------------------------------------------
def unit(*parts) -> float:
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()
    return int(digest[:8], 16) / 0x100000000


class CountingEvaluator:
    """Records every program it is sent; passes each with a made-up descriptor, except a
    program marked `# twin`, which it stops as a behavioural near-duplicate of the PPO seed."""

    def __init__(self, interrupt_at: int | None = None):
        self.sources: list[str] = []
        self.known_behaviours: list[dict | None] = []
        self.batches = 0
        self.interrupt_at = interrupt_at

    def evaluate_batch(self, sources, task, known_fingerprints=None, progress=None, **kw):
        self.batches += 1
        if self.batches == self.interrupt_at:
            raise KeyboardInterrupt
        self.sources += sources
        self.known_behaviours.append(kw.get("known_behaviours"))
        out = []
        for source in sources:
            digest = hashlib.sha256(source.encode()).hexdigest()[:16]
            behaviour = [unit(source, i) for i in range(8)]
            if "# twin" in source:
                reason = near_reason(PPO_ID, 1e-5, 1e-3)
                out.append(
                    Outcome.failure(
                        "probes",
                        reason,
                        duplicate_of=PPO_ID,
                        fingerprint=digest,
                        behaviour=behaviour,
                    )
                )
            else:
                out.append(
                    Outcome(
                        passed=True,
                        stage="full",
                        fitness=unit(source),
                        fingerprint=digest,
                        behaviour=behaviour,
                    )
                )
        return out

    def close(self):
        pass


class ScriptedProposer:
    """Answers requests from a list, in order, and keeps every request it was sent."""

    name = "scripted"

    def __init__(self, script):
        self.script, self.requests = list(script), []

    def propose(self, request):
        self.requests.append(request)
        return Proposal(code=self.script.pop(0), name=f"p{len(self.requests)}")

    def feedback(self, proposal, outcome, candidate_id):
        pass

    def get_state(self):
        return {}

    def set_state(self, state):
        pass

    def drain_messages(self):
        return []

    def restore_messages(self, messages):
        pass


class CopyingProposer(ScriptedProposer):
    """First asked: a renamed copy of PPO's clip (a near-duplicate); re-asked: a new program
    (every third one a behavioural twin). A function of the request, so a resumed run asks
    and gets the same."""

    def __init__(self):
        super().__init__([])

    def propose(self, request):
        self.requests.append(request)
        if not request.rejected:
            return Proposal(code=renamed_ppo(request.rng_seed % 1000), name="copy")
        twin = request.rng_seed % 3 == 0
        return Proposal(code=novel(request.rng_seed, twin), name="new")


def loop_config(**changes) -> DiscoverConfig:
    base = dict(
        suite="smoke",
        timesteps=8192,
        seeds=1,
        seed_values=[0],
        max_time=None,
        islands=1,
        confirm=False,
        max_concurrency=1,
    )
    return DiscoverConfig(**{**base, **changes})


def run_loop(path, proposer, evaluator, config, resume=None):
    with Archive(path) as archive:
        loop = DiscoveryLoop(
            archive,
            config,
            proposer,
            resume=resume,
            evaluator_factory=lambda settings, workers: evaluator,
        )
        return loop.run(), loop


def test_a_code_near_duplicate_is_re_asked_with_the_reason_and_never_evaluated(tmp_path):
    copies = [renamed_ppo(1), renamed_ppo(2), renamed_ppo(3)]
    # a generation's slots are proposed first, then each is deduplicated (and re-asked)
    proposer = ScriptedProposer([copies[0], copies[1], novel(5), copies[2]])
    evaluator = CountingEvaluator()
    path = tmp_path / "a.db"
    result, _ = run_loop(
        path, proposer, evaluator, loop_config(budget=2, children=2, dedup_retries=1)
    )
    assert result.status == "finished"
    # slot 0: the copy is re-asked, with the reason in the request; the new program is evaluated
    first, second, again, last = proposer.requests
    assert first.rejected == [] and second.rejected == []
    for request in (again, last):
        (note,) = request.rejected
        assert f"100% the same as candidate {PPO_ID} after normalisation" in note
        assert "propose something that behaves differently" in note
    assert novel(5) in evaluator.sources
    assert not set(copies) & set(evaluator.sources)  # no copy ever reached the evaluator
    with Archive(path, must_exist=True) as archive:
        kept, settled = [r for r in archive.run_candidates("r1") if not r["is_seed"]]
        assert kept["status"] == "passed" and kept["code"] == novel(5)
        assert settled["status"] == "duplicate" and settled["stage"] == "dedup"
        assert settled["duplicate_of"] == PPO_ID and settled["code"] == copies[2]
        # the live display's line names the candidate it repeats (it said "duplicate of ?")
        event = candidate_event(settled, {})
        assert fate_text(event).plain == f"duplicate of {PPO_ID}"
        assert settled["reason"] == (
            f"nearly the same program as candidate {PPO_ID}: similarity 1.000 after "
            "normalisation (names, comments and layout aside; near-duplicates are at least "
            f"{DEFAULT:g})"
        )
        state = archive.get_run("r1")["state"]
        assert state["near_duplicates_code"] == 3 and "near_duplicates_behaviour" not in state
        summary = summary_line(state)
    assert summary == "near-duplicates rejected before training: 3 (code 3, behaviour 0)"
    # the children's batch was sent the seeds' behaviour descriptors
    assert set(evaluator.known_behaviours[1]) == {"r1-0", PPO_ID}


def test_code_novelty_zero_turns_the_check_off(tmp_path):
    proposer = ScriptedProposer([renamed_ppo(1)])
    evaluator = CountingEvaluator()
    config = loop_config(budget=1, children=1, code_novelty=0.0, behaviour_novelty=0.0)
    run_loop(tmp_path / "a.db", proposer, evaluator, config)
    assert renamed_ppo(1) in evaluator.sources and proposer.requests[0].rejected == []
    assert evaluator.known_behaviours[1] is None  # nor are descriptors sent


def counts(path) -> tuple:
    with Archive(path, must_exist=True) as archive:
        run = archive.get_run("r1")
        rows = [r for r in archive.run_candidates("r1") if not r["is_seed"]]
        twins = sum(is_near(r["stage"], r["duplicate_of"], r["reason"]) for r in rows)
        state = run["state"]
        return (
            state.get("near_duplicates_code", 0),
            state.get("near_duplicates_behaviour", 0),
            twins,
            [(r["id"], r["code"], r["status"]) for r in rows],
        )


def test_the_counts_survive_a_resume(tmp_path):
    config = loop_config(budget=6, children=2)
    reference = tmp_path / "reference.db"
    run_loop(reference, CopyingProposer(), CountingEvaluator(), config)
    expected = counts(reference)
    code, behaviour, twins, rows = expected
    assert code == 6  # every slot's first answer was a renamed copy
    assert behaviour == twins >= 1
    path = tmp_path / "a.db"
    with pytest.raises(KeyboardInterrupt):  # in the second generation's batch
        run_loop(path, CopyingProposer(), CountingEvaluator(interrupt_at=3), config)
    with Archive(path, must_exist=True) as archive:
        state = archive.get_run("r1")["state"]
        assert state["plan"]["generation"] == 2 and state["near_duplicates_code"] == 4
    result, loop = run_loop(path, CopyingProposer(), CountingEvaluator(), config, resume="r1")
    assert result.status == "finished"
    assert counts(path) == expected
    # what `metarl discover`/`resume` prints at the end, and the report's header
    line = (
        f"near-duplicates rejected before training: {code + behaviour} "
        f"(code 6, behaviour {behaviour})"
    )
    with Archive(path, must_exist=True) as archive:
        run = archive.get_run("r1")
        assert header_of(run, None).near_duplicates == line
        summary = run_summary(archive, "r1")
        summary["near_duplicates"] = summary_line(loop.state.to_dict(), loop.config.to_dict())
        with console.capture() as captured:
            print_run_report(result, leaderboard(archive, run_id="r1"), summary, 1.0, 6, "")
    assert line in captured.get()


def test_runs_that_do_not_count_near_duplicates_show_no_line():
    assert summary_line({"generation": 3}, {"task": "drift"}) == ""
    assert summary_line(None) == ""
    counted = summary_line({}, DiscoverConfig().to_dict())
    assert counted == "near-duplicates rejected before training: 0 (code 0, behaviour 0)"


# -- what the LLM proposer is told -----------------------------------------------------------
NOTE = f"your program was 98% the same as candidate {PPO_ID} after normalisation"


def llm(server, **options):
    config = {"models": ["openai/scripted"], "api_base": server.api_base, "timeout_s": 10}
    return build_llm_proposer({**config, **options})


def reply(code: str) -> str:
    return json.dumps({"thought": "t", "name": "n", "code": code})


def test_a_re_asked_population_prompt_says_why_the_last_answer_was_rejected():
    parent = ParentInfo(id=PPO_ID, code=PPO, name="ppo_clip", fitness=1.0)
    with ScriptedLLMServer() as server:
        server.push(reply(novel(3)))
        request = ProposalRequest(task=DRIFT, parents=[parent], rejected=[NOTE])
        llm(server, edit_forms={"rewrite": 1.0}).propose(request)
        user = server.requests[0]["messages"][1]["content"]
    assert user.startswith("Your earlier answers to this request were not evaluated:\n- " + NOTE)


def test_a_re_asked_conversation_is_told_the_reason():
    parent = ParentInfo(id=PPO_ID, code=PPO, name="ppo_clip", fitness=1.0)
    with ScriptedLLMServer() as server:
        server.push(reply(renamed_ppo(1)), reply(novel(4)))
        proposer = llm(server, mode="conversation")
        proposer.propose(ProposalRequest(task=DRIFT, parents=[parent]))
        proposer.propose(ProposalRequest(task=DRIFT, parents=[parent], rejected=[NOTE]))
        told = server.requests[-1]["messages"][-1]["content"]
    assert told.startswith(f"That program was not evaluated: {NOTE}. Propose the next program")
