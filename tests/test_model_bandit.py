"""The model bandit (metarl issue 26): with several `--model`s, each proposal's model is chosen
by Thompson sampling on improvement per dollar (per second for unpriced models).

Unit checks on the bandit itself (every arm first, then the best improvement per unit of cost;
reproducible from its state and the seeds; its state round-trips; dollars and seconds), the LLM
proposer feeding it in both modes, and the done-means check: a real DiscoveryLoop against two
scripted local models, where "good" writes programs that improve on their parent and "bad"
programs that do not, shifts the proposals to "good". The loop runs with a fake evaluator (no
training): a program's fitness is read from the `level = N` it declares. A resumed run makes
the same choices as an uninterrupted one, and the report shows the models' shares and yields.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import threading
from collections import Counter

import pytest
from conftest import invoke
from llm_server import ScriptedLLMServer
from report_pages import rows, sections
from role_evaluator import SEEDS, RoleEvaluator, unit

from metarl.archives import Archive
from metarl.discovery.config import ConfigError, DiscoverConfig
from metarl.discovery.loop import DiscoveryLoop
from metarl.discovery.proposers import make_proposer
from metarl.discovery.proposers.base import LLMCall, ParentInfo, ProposalRequest
from metarl.discovery.proposers.llm import LLMConfigError, build_llm_proposer
from metarl.discovery.proposers.llm.bandit import (
    SECONDS,
    USD,
    ModelBandit,
    Spend,
    improvement_of,
    spends,
)
from metarl.discovery.proposers.mutation import MutationProposer
from metarl.evaluation.outcome import Outcome
from metarl.report.page import write_report
from metarl.rl.suites import SUITES, Suite
from metarl.tasks import get_task

TASK = get_task("drift")
PPO = TASK.seed_program("ppo_clip").source
GOOD, BAD = "openai/good", "openai/bad"


def observed(bandit: ModelBandit, model: str, times: int, gain: float, spend: Spend) -> None:
    for _ in range(times):
        bandit.observe(model, gain, spend)


def shares(bandit: ModelBandit, draws: int = 400, rng_seed: int = 0) -> Counter:
    return Counter(bandit.choose(rng_seed, seed) for seed in range(draws))


# -- the bandit --------------------------------------------------------------------------------
def test_the_bandit_tries_every_arm_before_it_prefers_one():
    bandit = ModelBandit.for_models(["a", "b", "c"])
    observed(bandit, "a", 5, 1.0, Spend(None, 1.0))
    assert set(shares(bandit)) == {"b", "c"}  # "a" did well, but the others are untried
    observed(bandit, "b", 1, 0.0, Spend(None, 1.0))
    assert set(shares(bandit)) == {"c"}
    observed(bandit, "c", 1, 0.0, Spend(None, 1.0))
    assert shares(bandit).most_common(1)[0][0] == "a"


def test_the_bandit_prefers_more_improvement_per_unit_of_cost():
    same_cost = ModelBandit.for_models(["more", "less"])
    observed(same_cost, "more", 6, 0.3, Spend(None, 2.0))
    observed(same_cost, "less", 6, 0.1, Spend(None, 2.0))
    assert shares(same_cost)["more"] > 0.8 * 400
    # the same improvements, at a tenth of the price: per dollar, the cheap model wins
    cheaper = ModelBandit.for_models(["pricey", "cheap"])
    observed(cheaper, "pricey", 6, 0.2, Spend(0.10, 2.0))
    observed(cheaper, "cheap", 6, 0.2, Spend(0.01, 2.0))
    assert shares(cheaper)["cheap"] > 0.8 * 400
    # per second for local models: the faster one wins at equal improvements
    faster = ModelBandit.for_models(["slow", "fast"])
    observed(faster, "slow", 6, 0.2, Spend(None, 30.0))
    observed(faster, "fast", 6, 0.2, Spend(None, 3.0))
    assert shares(faster)["fast"] > 0.8 * 400
    assert faster.means()["fast"] > faster.means()["slow"]


def test_a_failing_model_still_gets_an_occasional_try():
    bandit = ModelBandit.for_models(["good", "bad"])
    observed(bandit, "good", 3, 0.2, Spend(None, 1.0))
    observed(bandit, "bad", 3, 0.0, Spend(None, 1.0))
    counts = shares(bandit, 1000)
    assert counts["good"] > 800 and counts["bad"] > 10


def test_choices_are_reproducible_from_the_state_and_the_seeds():
    bandit = ModelBandit.for_models(["a", "b"])
    observed(bandit, "a", 2, 0.1, Spend(None, 1.0))
    observed(bandit, "b", 2, 0.05, Spend(None, 1.0))
    first = [bandit.choose(7, seed) for seed in range(200)]
    # concurrently, in another order, from a copy through JSON: the same choices
    copy = ModelBandit.from_dict(json.loads(json.dumps(bandit.to_dict())))
    out: dict[int, str] = {}

    def pick(seed: int) -> None:
        out[seed] = copy.choose(7, seed)

    threads = [threading.Thread(target=pick, args=(seed,)) for seed in reversed(range(200))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [out[seed] for seed in range(200)] == first
    assert [bandit.choose(8, seed) for seed in range(200)] != first  # the run's seed matters
    assert bandit.choose(7, 3, attempt=1) in {"a", "b"}


def test_the_state_round_trips_and_follows_the_runs_models():
    bandit = ModelBandit.for_models(["a", "b"])
    bandit.observe("a", 0.5, Spend(0.02, 3.0))
    bandit.observe("b", 0.0, Spend(None, 4.0))
    data = json.loads(json.dumps(bandit.to_dict()))
    again = ModelBandit.from_dict(data)
    assert again.to_dict() == bandit.to_dict() and again.posterior() == bandit.posterior()
    renamed = ModelBandit.from_dict(data, ["b", "c"])
    assert list(renamed.arms) == ["b", "c"] and renamed.arms["b"] == bandit.arms["b"]
    assert renamed.arms["c"].pulls == 0
    bandit.observe("nobody", 1.0, Spend(None, 1.0))  # logged, left out
    assert "nobody" not in bandit.arms


def test_dollars_and_seconds_are_both_costs():
    call = dict(prompt=[], reply="text")
    calls = [
        LLMCall(model="p", cost_usd=0.01, latency_s=2.0, **call),
        LLMCall(model="p", cost_usd=None, latency_s=5.0, prompt=[], reply=None, error="429"),
        LLMCall(model="p", cost_usd=0.03, latency_s=1.0, **call),
        LLMCall(model="local", cost_usd=None, latency_s=4.0, **call),
        LLMCall(model="free", cost_usd=0.0, latency_s=1.5, **call),
    ]
    spent = spends(calls)
    assert list(spent) == ["p", "local", "free"]
    # a call that never answered is not billed: the proposal stays priced
    assert spent["p"].usd == pytest.approx(0.04) and spent["p"].seconds == pytest.approx(8.0)
    assert spent["local"] == Spend(None, 4.0)
    assert spent["free"].usd is None  # priced at zero: no price, so its seconds count
    bandit = ModelBandit.for_models(["p", "local"])
    bandit.observe("p", 0.1, spent["p"])
    bandit.observe("local", 0.1, spent["local"])
    assert bandit.arms["p"].unit == USD and bandit.arms["local"].unit == SECONDS
    # each arm's cost is relative to the typical proposal of its kind: one proposal each,
    # the same improvement, so the same posterior whatever the units
    assert bandit.posterior()["p"] == pytest.approx(bandit.posterior()["local"])
    bandit.observe("p", 0.0, Spend(None, 9.0))  # an unpriced proposal: seconds from now on
    assert bandit.arms["p"].unit == SECONDS and bandit.arms["p"].cost == pytest.approx(17.0)


def test_improvement_is_only_what_beats_the_parent():
    assert improvement_of(1.3, 1.0) == pytest.approx(0.3)
    assert improvement_of(0.9, 1.0) == 0.0
    assert improvement_of(None, 1.0) == 0.0 and improvement_of(1.2, None) == 0.0
    assert improvement_of(float("nan"), 1.0) == 0.0


# -- the proposer feeds it ---------------------------------------------------------------------
def _program(tag: str, level: int | None = None) -> str:
    lines = ["def drift(ratio, advantage, epsilon):"]
    if level is not None:
        lines.append(f"    level = {level}")
    lines += [f"    tag = {tag}", "    return jnp.abs(ratio - 1.0) * 0.0 * tag"]
    return "\n".join(lines) + "\n"


def _reply(code: str) -> str:
    return json.dumps({"thought": "scripted", "name": "scripted", "code": code})


def _passed(fitness: float) -> Outcome:
    return Outcome(passed=True, stage="full", fitness=fitness)


PARENT = ParentInfo(id="c-ppo", code=PPO, name="ppo_clip", fitness=1.0)


def _request(seed: int) -> ProposalRequest:
    return ProposalRequest(task=TASK, parents=[PARENT], inspirations=[], rng_seed=seed)


@pytest.fixture
def two_models():
    tags = itertools.count()
    with ScriptedLLMServer(responder=lambda body: _reply(_program(str(next(tags))))) as server:
        yield server


def _two_model_proposer(server, **options):
    return build_llm_proposer(
        {"models": [GOOD, BAD], "api_base": server.api_base, "timeout_s": 10, **options}
    )


def test_population_feedback_feeds_the_bandit_and_the_state_carries_it(two_models):
    proposer = _two_model_proposer(two_models)
    bandit = proposer.client.bandit
    assert bandit is not None and list(bandit.arms) == [GOOD, BAD]
    proposal = proposer.propose(_request(1))
    model = proposal.proposer.removeprefix("llm:")
    assert proposal.parent_fitness == 1.0 and proposal.calls[0].model == model
    proposer.feedback(proposal, _passed(1.25), "c1")
    arm = bandit.arms[model]
    assert (arm.pulls, arm.improved, arm.improvement) == (1, 1, pytest.approx(0.25))
    assert arm.unit == SECONDS and arm.seconds > 0  # the scripted models have no price
    failed = proposer.propose(_request(2))
    proposer.feedback(failed, Outcome.failure("probes", "NaN"), "c2")
    fault = proposer.propose(_request(3))
    proposer.feedback(fault, Outcome.evaluator_fault("the sandbox died"), "c3")
    assert sum(a.pulls for a in bandit.arms.values()) == 2  # an evaluator fault is nobody's
    assert sum(a.improved for a in bandit.arms.values()) == 1

    state = json.loads(json.dumps(proposer.get_state()))
    resumed = _two_model_proposer(two_models)
    resumed.set_state(state)
    assert resumed.client.bandit.to_dict() == bandit.to_dict()
    assert [resumed.client.choose_model(s) for s in range(50)] == [
        proposer.client.choose_model(s) for s in range(50)
    ]


def test_conversation_feedback_feeds_the_bandit_too(two_models):
    proposer = _two_model_proposer(two_models, mode="conversation")
    proposal = proposer.propose(_request(4))
    assert proposal.parent_fitness == 1.0
    proposer.feedback(proposal, _passed(1.5), "c1")
    model = proposal.proposer.removeprefix("llm:")
    assert proposer.client.bandit.arms[model].improvement == pytest.approx(0.5)
    follow = proposer.propose(_request(5))
    assert follow.parent_ids == ["c1"] and follow.parent_fitness == 1.5  # the last program's
    assert proposer.drain_messages()  # the dialogue goes on as before


def test_weights_stay_an_explicit_choice(two_models):
    proposer = _two_model_proposer(two_models, model_choice="weights")
    assert proposer.client.bandit is None
    picks = {proposer.client.choose_model(s) for s in range(40)}
    assert picks == {GOOD, BAD}
    proposal = proposer.propose(_request(1))
    proposer.feedback(proposal, _passed(2.0), "c1")  # nothing to feed, nothing breaks
    assert proposer.get_state()["bandit"] is None
    single = build_llm_proposer({"models": [GOOD], "api_base": two_models.api_base})
    assert single.client.bandit is None  # one model: nothing to choose
    with pytest.raises(LLMConfigError, match="model choice"):
        _two_model_proposer(two_models, model_choice="ucb")


def test_the_config_validates_the_model_choice_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="unknown model choice 'ucb'; choose bandit or weights"):
        DiscoverConfig(model_choice="ucb").resolved()
    assert DiscoverConfig().model_choice == "bandit"
    db = str(tmp_path / "metarl.db")
    result = invoke("discover", "--model-choice", "ucb", "--archive", db, "--no-live")
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert result.exit_code != 0 and len(lines) == 1 and "unknown model choice" in lines[0]
    assert "--model-choice" in invoke("discover", "--help").output


# -- the done-means check: a real loop against two scripted local models -------------------------
LEVEL = re.compile(r"level = (\d+)")


class LevelEvaluator(RoleEvaluator):
    """A program's return is 6 + the `level = N` it declares (seed programs: 5 to 6; a program
    without a level: 4), so a child one level above its best parent improves on it by 0.2."""

    def value(self, source: str, role: str, env: str, seed: int) -> float:
        if source in SEEDS:
            return 5.0 + unit(source, role)
        found = LEVEL.search(source)
        return 6.0 + int(found.group(1)) if found else 4.0


def scripted_levels():
    """A responder: "good" writes a program one level above every program in its prompt,
    "bad" one without a level. A tag keeps every program new (it changes no score)."""
    tags = itertools.count()
    lock = threading.Lock()

    def respond(body: dict) -> str:
        with lock:
            tag = str(next(tags))
        if body.get("model") != "good":
            return _reply(_program(tag))
        text = " ".join(str(m.get("content") or "") for m in body.get("messages", []))
        levels = [int(n) for n in LEVEL.findall(text)]
        return _reply(_program(tag, max(levels, default=0) + 1))

    return respond


@pytest.fixture(scope="module")
def level_suite():
    suite = Suite(
        "bandit-levels",
        envs=("CartPole-v1",),
        total_timesteps=8192,
        short_budget=4096,
        heldout=(),
        validation=(),
        default_seeds=1,
    )
    SUITES[suite.name] = suite
    yield suite.name
    SUITES.pop(suite.name, None)


def loop_config(api_base: str, budget: int, **changes) -> DiscoverConfig:
    fields = {f.name for f in dataclasses.fields(DiscoverConfig)}
    # features of other issues that would add calls or reject programs: off, where they exist
    off = {name: 0 for name in ("guidance_every", "code_novelty") if name in fields}
    base = dict(
        suite="bandit-levels",
        proposer="llm",
        models=[GOOD, BAD],
        api_base=api_base,
        llm_timeout=20.0,
        timesteps=8192,
        seeds=1,
        seed_values=[0],
        max_time=None,
        islands=1,
        population=6,
        children=4,
        budget=budget,
        confirm=False,
        heldout=False,
        novelty=0.0,  # selection must not read the tags
        rng_seed=11,
    )
    return DiscoverConfig(**{**base, **off, **changes})


def pinned_latency(proposer):
    """A local model's cost is its latency; the scripted server's is scheduler noise, so each
    call is said to take one second and the run is exact."""
    chat = proposer.client.chat

    def call(*args, **kwargs):
        made = chat(*args, **kwargs)
        made.latency_s = 1.0
        return made

    proposer.client.chat = call
    return proposer


def run_loop(path, config: DiscoverConfig, resume: str | None = None):
    """(run id, the proposer after the run)."""
    proposer = pinned_latency(make_proposer("llm", config.resolved()))
    log: list = []
    with Archive(path) as archive:
        loop = DiscoveryLoop(
            archive,
            config,
            proposer,
            resume=resume,
            evaluator_factory=lambda settings, workers: LevelEvaluator(settings, log, noise=0.0),
        )
        result = loop.run()
    assert result.status == "finished", result.reason
    return result.run_id, proposer


def children(path, run_id: str) -> list[dict]:
    with Archive(path, must_exist=True) as archive:
        return [r for r in archive.run_candidates(run_id) if not r["is_seed"]]


def model_shares(rows: list[dict], generations: set[int]) -> dict[str, float]:
    chosen = [r["proposer"] for r in rows if r["generation"] in generations]
    return {model: chosen.count("llm:" + model) / len(chosen) for model in (GOOD, BAD)}


@pytest.fixture(scope="module")
def bandit_run(level_suite, tmp_path_factory):
    """(archive, run id, proposer, server): 8 generations of 4 children, uninterrupted."""
    path = tmp_path_factory.mktemp("bandit") / "metarl.db"
    with ScriptedLLMServer(responder=scripted_levels()) as server:
        run_id, proposer = run_loop(path, loop_config(server.api_base, budget=32))
        yield path, run_id, proposer, server


def test_the_bandit_shifts_proposals_to_the_model_that_improves_more(bandit_run):
    path, run_id, proposer, _ = bandit_run
    rows = children(path, run_id)
    assert len(rows) == 32
    good = [r for r in rows if r["proposer"] == "llm:" + GOOD]
    bad = [r for r in rows if r["proposer"] == "llm:" + BAD]
    assert good and bad  # both were tried
    assert all(r["status"] == "passed" for r in good)
    assert all(r["fitness"] < 1.0 for r in bad)  # below every seed: never an improvement
    first = model_shares(rows, {1})
    late = model_shares(rows, {6, 7, 8})
    assert late[GOOD] >= 0.75 and late[GOOD] > late[BAD] and late[GOOD] > first[GOOD]
    arms = proposer.client.bandit.arms
    assert arms[GOOD].improved == arms[GOOD].pulls == len(good)
    assert arms[BAD].improved == 0 and arms[BAD].pulls == len(bad)
    assert proposer.client.bandit.means()[GOOD] > 3 * proposer.client.bandit.means()[BAD]


def test_a_resumed_run_continues_with_the_same_bandit(bandit_run, tmp_path):
    _, run_id, proposer, server = bandit_run
    reference = children(bandit_run[0], run_id)
    path = tmp_path / "metarl.db"
    first, _ = run_loop(path, loop_config(server.api_base, budget=12))
    assert first == run_id  # a new archive: the same first run id
    with Archive(path, must_exist=True) as archive:
        stored = archive.get_run(first)["state"]["proposer"]["bandit"]
    assert sum(arm["pulls"] for arm in stored["arms"].values()) == 12
    _, resumed = run_loop(path, loop_config(server.api_base, budget=32), resume=first)
    after = children(path, first)
    assert [(r["id"], r["proposer"], r["fitness"]) for r in after] == [
        (r["id"], r["proposer"], r["fitness"]) for r in reference
    ]
    assert resumed.client.bandit.to_dict() == proposer.client.bandit.to_dict()


def test_a_resume_keeps_the_runs_model_choice(bandit_run, tmp_path):
    # lazy: the CLI module is only needed for its resume check
    from metarl.cli.discover import _resume_config

    path, run_id, _, _ = bandit_run
    with pytest.raises(ConfigError, match="model_choice 'bandit'"):
        _resume_config(str(path), run_id, {}, {"model_choice": "weights"})
    assert _resume_config(str(path), run_id, {}, {"model_choice": "bandit"}).model_choice == (
        "bandit"
    )
    # a run archived before the option chose by weights, and resumes so
    old = tmp_path / "old.db"
    old.write_bytes(path.read_bytes())
    with Archive(old, must_exist=True) as archive:
        config = dict(archive.get_run(run_id)["config"])
        del config["model_choice"]
        archive.update_run(run_id, config=config)
    assert _resume_config(str(old), run_id, {}, {}).model_choice == "weights"


def test_the_report_shows_each_models_share_and_yield(bandit_run, level_suite, tmp_path):
    path, run_id, _, _ = bandit_run
    copy = tmp_path / "metarl.db"
    copy.write_bytes(path.read_bytes())
    single = loop_config("", budget=4, proposer="mutation", models=[])
    with Archive(copy) as archive:
        loop = DiscoveryLoop(
            archive,
            single,
            MutationProposer(),
            evaluator_factory=lambda settings, workers: LevelEvaluator(settings, [], noise=0.0),
        )
        other = loop.run().run_id
        page = write_report(archive, [run_id], tmp_path / "report.html")
        mutation_page = write_report(archive, [other], tmp_path / "mutation.html")
    html = page.path.read_text()
    section = sections(html)[(run_id, "models")]
    assert "by a bandit on improvement per dollar" in section and f"{run_id}-models-plot" in section
    table = rows(section, "model")
    rows_ = children(path, run_id)
    for model in (GOOD, BAD):
        own = [r for r in rows_ if r["proposer"] == "llm:" + model]
        passed = sum(r["status"] == "passed" for r in own)
        assert table[model][1] == str(len(own))
        assert table[model][3] == str(passed)
    assert table[GOOD][5] == table[GOOD][1]  # every good child improved on its parent
    assert table[BAD][5] == "0"
    by_generation = rows(section, "generation")
    assert list(by_generation) == [str(g) for g in range(1, 9)]
    assert not any(name == "models" for _, name in sections(mutation_page.path.read_text()))
