"""Selection by role (issue 23): training scores nominate, validation races decide, test
scores are measured and never read.

In-process with a role-aware fake evaluator (no sandbox, no training): it scores every planned
environment of its purpose (evaluation/settings.py `plan_runs`) from a per-program quality and
a per-seed noise, so each property is exact and deterministic.
"""

from __future__ import annotations

import pytest
from role_evaluator import SEEDS, RoleEvaluator, unit

from metarl.archives import Archive
from metarl.discovery.config import DiscoverConfig
from metarl.discovery.loop import DiscoveryLoop
from metarl.discovery.proposers.mutation import MutationProposer
from metarl.evaluation import statistics
from metarl.rl.suites import SUITES, Suite


@pytest.fixture
def role_suites(monkeypatch):
    """Two suites that differ only in their test environments."""
    for name, test in (("roles-a", ("Catch-bsuite",)), ("roles-b", ("MountainCar-v0",))):
        suite = Suite(
            name,
            envs=("CartPole-v1",),
            total_timesteps=8192,
            short_budget=4096,
            heldout=test,
            validation=("CartPole-v1:gravity=15.0+force_mag=7.0", "Acrobot-v1"),
            default_seeds=1,
        )
        monkeypatch.setitem(SUITES, name, suite)


def config(**changes) -> DiscoverConfig:
    base = dict(
        suite="roles-a",
        timesteps=8192,
        seeds=1,
        seed_values=[0],
        max_time=None,
        islands=1,
        budget=6,
        children=3,
        confirm=True,
        confirm_seeds=4,
        race_seeds=12,
        rng_seed=3,
    )
    return DiscoverConfig(**{**base, **changes})


def run(path, cfg, **evaluator):
    log, events = [], []
    with Archive(path) as archive:
        loop = DiscoveryLoop(
            archive,
            cfg,
            MutationProposer(),
            on_event=lambda kind, data: events.append((kind, data)),
            evaluator_factory=lambda settings, workers: RoleEvaluator(settings, log, **evaluator),
        )
        result = loop.run()
        rows = archive.run_candidates(result.run_id)
    return result, rows, events, log


def decided(events):
    """The races' decisive looks: each race's last (a clearly better child is undecided at 4
    seeds a side, where the exact test cannot call BETTER, and wins at 8)."""
    return [d for kind, d in events if kind == "confirm" and d["verdict"] != "undecided"]


def choices(rows, events):
    """Everything the search decided: the programs, their lineage, and the incumbents."""
    programs = [(r["id"], r["code"], tuple(r["parent_ids"] or ()), r["status"]) for r in rows]
    incumbents = [d["incumbent"] for kind, d in events if kind == "generation"]
    races = [(d["id"], d["verdict"], d["runs"]) for kind, d in events if kind == "confirm"]
    return programs, incumbents, races


def test_runs_with_different_test_envs_make_the_same_proposals_and_selections(
    tmp_path, role_suites
):
    a = run(tmp_path / "a.db", config(suite="roles-a"), validation_gain=1.0)
    b = run(
        tmp_path / "b.db",
        config(suite="roles-b"),
        validation_gain=1.0,
        # test returns that would flip every decision if selection read them
        test_return=lambda source, env, seed: -1000.0 * unit(source, "train"),
    )
    (_, rows_a, events_a, _), (_, rows_b, events_b, _) = a, b
    assert choices(rows_a, events_a) == choices(rows_b, events_b)
    assert choices(rows_a, events_a)[2], "no race was run: the property was not exercised"
    tested_a = {r["id"]: r["final_heldout"] for r in rows_a if r["final_heldout"] is not None}
    tested_b = {r["id"]: r["final_heldout"] for r in rows_b if r["final_heldout"] is not None}
    assert tested_a and tested_a.keys() == tested_b.keys()
    assert all(tested_a[k] != tested_b[k] for k in tested_a)  # the test envs were measured


def test_a_child_clearly_better_on_validation_wins_at_the_first_look_that_can_call_it(
    tmp_path, role_suites
):
    _, rows, events, log = run(tmp_path / "a.db", config(), validation_gain=1.0)
    races = [d for kind, d in events if kind == "confirm"]
    # the run's first race looks at 4, 8 and 12 seeds; at 4 a side the exact test's smallest
    # p-value, 1/70, lies above a third of the race's share of 0.05, so that look spends
    # nothing and the share is split between 8 and 12
    plan = statistics.race_plan(1, 4, 12, 0.05)
    assert [(d["verdict"], d["runs"], d["level"]) for d in races[:2]] == [
        ("undecided", 4, 0.0),
        ("better", 8, plan.level(8)),
    ]
    assert races[0]["p"] == 1 / 70 and races[1]["p"] <= plan.level(8) and races[1]["cap"] == 12
    incumbents = [d["incumbent"] for kind, d in events if kind == "generation"]
    assert incumbents[0] == races[1]["id"]
    winner = next(r for r in rows if r["id"] == races[1]["id"])
    assert winner["validation"] is not None and winner["validation_low"] is not None
    assert len(winner["validation_seeds"]) == 8 and 0 not in winner["validation_seeds"]
    # validation rounds score only the validation envs; the winner's test is measured after
    validation_rounds = [entry for entry in log if entry[0] == ("validation", "validation")]
    assert validation_rounds[0][1] == 2  # incumbent and challenger in one batch: shared seeds
    assert ("test",) in [entry[0] for entry in log]


def test_a_child_clearly_worse_on_validation_is_stopped_after_one_round(tmp_path, role_suites):
    _, rows, events, log = run(tmp_path / "a.db", config(budget=3), validation_gain=-1.0)
    races = [d for kind, d in events if kind == "confirm"]
    assert [(d["verdict"], d["runs"]) for d in races] == [("worse", 4)]
    seeds_incumbent = [d["incumbent"] for kind, d in events if kind == "generation"]
    assert seeds_incumbent[0] in {r["id"] for r in rows if r["is_seed"]}
    assert ("test",) not in [entry[0] for entry in log]  # no new incumbent, no test round


def test_a_child_that_can_no_longer_win_is_stopped_after_one_round(tmp_path, role_suites):
    """Below the incumbent on each paired seed but within the seeds' spread (its runs
    interleave with the incumbent's, so the futility test does not stop it), and so far below
    that even with its next 4 runs above every run so far the race's one look that can call
    BETTER (8 a side, at a run error of 0.01) would not: it stops as unwinnable, after one
    round instead of two."""
    cfg = config(budget=3, race_seeds=8, selection_error=0.01)
    _, rows, events, log = run(tmp_path / "a.db", cfg, validation_gain=-0.5, noise=40.0)
    races = [d for kind, d in events if kind == "confirm"]
    assert [(d["verdict"], d["runs"], d["level"]) for d in races] == [("unwinnable", 4, 0.0)]
    assert races[0]["p"] > 0.5  # the exact p of BETTER: it looks worse, not clearly worse
    assert len([entry for entry in log if entry[0] == ("validation", "validation")]) == 1
    incumbent = [d["incumbent"] for kind, d in events if kind == "generation"][-1]
    assert incumbent in {r["id"] for r in rows if r["is_seed"]}


def test_a_close_child_is_raced_to_the_cap_and_keeps_the_incumbent(tmp_path, role_suites):
    # equal validation quality up to the programs' own small differences, large seed noise
    _, rows, events, log = run(tmp_path / "a.db", config(budget=3), validation_gain=0.0, noise=40.0)
    races = [d for kind, d in events if kind == "confirm"]
    assert races and races[-1]["verdict"] == "tie" and races[-1]["runs"] == 12
    assert [d["runs"] for d in races] == [4, 8, 12]
    # one race: every look at its plan's level, the first (4 a side) at none
    plan = statistics.race_plan(1, 4, 12, 0.05)
    assert [d["level"] for d in races] == [plan.level(4), plan.level(8), plan.level(12)]
    incumbent = [d["incumbent"] for kind, d in events if kind == "generation"][-1]
    assert incumbent in {r["id"] for r in rows if r["is_seed"]}
    # every validation round drew seeds neither had seen
    seen = [set(entry[2]) for entry in log if entry[0] == ("validation", "validation")]
    assert all(not (x & y) for i, x in enumerate(seen) for y in seen[i + 1 :])


def test_a_copy_in_behaviour_of_the_incumbent_is_stopped_after_one_paired_round(
    tmp_path, role_suites
):
    """Every child returns exactly alike on validation (one behaviour, many sources:
    constants changed where training never reaches), while training scores still differ
    (as on the different seeds children are drawn). The first child to race the seed
    incumbent wins; after that, each challenger is a copy of the new incumbent: its one
    round is trained on the incumbent's validation seeds (paired: comparable return by
    return), shows identical returns, and the race stops there: never a second round."""
    _, rows, events, log = run(
        tmp_path / "a.db",
        config(budget=9),
        validation_gain=1.0,
        behaviour=lambda source, role: (
            "child" if role == "validation" and source not in SEEDS else source
        ),
    )
    races = decided(events)
    copies = [d for kind, d in events if kind == "duplicate"]
    assert [d["verdict"] for d in races] == ["better"]
    winner = races[0]["id"]
    assert copies and {d["incumbent"] for d in copies} == {winner}
    assert all(d["runs"] == 8 for d in copies)  # 4 seeds x 2 validation envs, all identical
    incumbents = [d["incumbent"] for kind, d in events if kind == "generation"]
    assert incumbents == [winner] * 3
    rounds = [entry for entry in log if entry[0] == ("validation", "validation")]
    # the winner's race (both, two rounds of fresh seeds), then one round per copy, alone,
    # on the seeds of the winner's first round
    assert [n for _, n, _ in rounds] == [2, 2] + [1] * len(copies)
    assert all(seeds == rounds[0][2] for _, _, seeds in rounds[2:])


def test_a_challenger_trained_on_a_seed_of_the_incumbents_round_pairs_with_its_next(
    tmp_path, role_suites
):
    """The run's seed pool is shared, so a generation can train a child on a seed of an
    earlier race's validation round. Raced alone, that child is paired with the incumbent's
    next round whose seeds are all fresh to it (the baseline's runs there are cached), not
    sent to draw fresh seeds; only when every round holds a seed it saw does it draw."""
    from metarl.discovery.races import Races

    _, rows, events, log = run(tmp_path / "a.db", config(budget=3), validation_gain=0.0, noise=40.0)
    races_seen = [d for kind, d in events if kind == "confirm"]
    incumbent, raced = races_seen[-1]["incumbent"], races_seen[-1]["id"]
    other = next(r["id"] for r in rows if not r["is_seed"] and r["id"] != raced)
    with Archive(tmp_path / "a.db") as archive:
        rounds = list(
            dict.fromkeys(
                tuple(row["seeds"]) for row in archive.role_evaluations(incumbent, "validation")
            )
        )
        assert len(rounds) == 3  # raced to the cap of 12 in rounds of 4
        races = Races(archive, config().resolved(), None, None, "r1", [], lambda *a: None)
        races._seen = lambda cids: {rounds[0][1]}  # trained on a seed of the first round
        assert races._incumbent_round(incumbent, other) == list(rounds[1])
        races._seen = lambda cids: {rounds[0][0], rounds[1][2], rounds[2][3]}
        assert races._incumbent_round(incumbent, other) is None


def test_the_proposer_sees_neither_test_envs_nor_test_numbers(tmp_path, role_suites):
    from metarl.discovery.planning import parent_info
    from metarl.discovery.proposers.llm.prompts import describe_program

    _, rows, _, _ = run(
        tmp_path / "a.db",
        config(budget=0),
        test_return=lambda source, env, seed: 123456.0,
    )
    seed = next(r for r in rows if r["is_seed"] and r["heldout"] is not None)
    with Archive(tmp_path / "a.db", must_exist=True) as archive:
        info = parent_info(archive, seed["id"])
    assert info.outcome.heldout is None and info.outcome.heldout_ci is None
    assert {s.role for s in info.outcome.env_scores} == {"train"}
    text = describe_program(info, "drift")
    assert "Catch-bsuite" not in text and "123456" not in text and "CartPole-v1" in text


# -- past the budget: the race's winner is checked at `stability` times it (races.py) --------


def stability_rounds(log):
    """The log's stability rounds: (programs, seeds) of each batch trained past the budget."""
    return [(n, set(seeds)) for roles, n, seeds in log if roles and "@" in roles[0]]


def test_a_race_winner_that_collapses_past_the_budget_is_refused(tmp_path, role_suites):
    """Better on validation at the run's budget, worse at 5x (the protocol's): the race is
    won, the stability check refuses it, the seed stays the incumbent and no test is run."""
    _, rows, events, log = run(
        tmp_path / "a.db", config(budget=3, stability=5.0), validation_gain=1.0, long_gain=-1.0
    )
    races = decided(events)
    checks = [d for kind, d in events if kind == "stability"]
    assert [d["verdict"] for d in races] == ["better"]
    assert [(d["id"], d["verdict"], d["factor"], d["runs"]) for d in checks] == [
        (races[0]["id"], "worse", 5.0, 4)
    ]
    incumbents = [d["incumbent"] for kind, d in events if kind == "generation"]
    assert incumbents[-1] == races[0]["incumbent"] and incumbents[-1] != races[0]["id"]
    assert ("test",) not in [entry[0] for entry in log]
    # one round, both sides in one batch, at 5x the budget, on seeds fresh to both
    [(programs, seeds)] = stability_rounds(log)
    assert programs == 2
    assert [roles for roles, _, _ in log if roles and "@" in roles[0]][0][0] == (
        f"validation@{5 * 8192}"
    )
    by_id = {r["id"]: r for r in rows}
    for cid in (races[0]["id"], races[0]["incumbent"]):
        row = by_id[cid]
        assert not seeds & {*row["seeds"], *(row["validation_seeds"] or [])}
    with Archive(tmp_path / "a.db", must_exist=True) as archive:
        stored = archive.role_evaluations(races[0]["id"], "stability")
        envs = {"CartPole-v1:gravity=15.0+force_mag=7.0", "Acrobot-v1"}
        assert {r["env"] for r in stored} == envs
        assert {r["total_timesteps"] for r in stored} == {5 * 8192}


def test_a_collapse_on_one_validation_env_refuses_whatever_the_others_say(tmp_path, role_suites):
    """Past the budget the child stays better on one validation env and falls far behind on
    the other (as the collapsing drift on Catch, which every program solves, and Breakout):
    env by env, the collapse refuses it."""
    collapse = {"Acrobot-v1": -1.0}
    _, _, events, _ = run(
        tmp_path / "a.db", config(budget=3, stability=5.0), validation_gain=1.0, long_gain=collapse
    )
    checks = [d for kind, d in events if kind == "stability"]
    assert [(d["verdict"], d["env"]) for d in checks] == [("worse", "Acrobot-v1")]
    incumbents = [d["incumbent"] for kind, d in events if kind == "generation"]
    assert incumbents[-1] != checks[0]["id"]


def test_a_race_winner_that_holds_past_the_budget_takes_the_place(tmp_path, role_suites):
    _, _, events, log = run(tmp_path / "a.db", config(budget=3, stability=5.0), validation_gain=1.0)
    checks = [d for kind, d in events if kind == "stability"]
    assert [d["verdict"] for d in checks] == ["better"]
    incumbents = [d["incumbent"] for kind, d in events if kind == "generation"]
    assert incumbents[-1] == checks[0]["id"]
    assert ("test",) in [entry[0] for entry in log]  # the new incumbent's test is measured


def test_stability_zero_checks_nothing(tmp_path, role_suites):
    _, _, events, log = run(
        tmp_path / "a.db", config(budget=3, stability=0), validation_gain=1.0, long_gain=-1.0
    )
    assert not [d for kind, d in events if kind == "stability"] and not stability_rounds(log)
    races = [d for kind, d in events if kind == "confirm"]
    incumbents = [d["incumbent"] for kind, d in events if kind == "generation"]
    assert incumbents[-1] == races[0]["id"]  # without the check the collapsing winner is crowned


def test_an_archived_stability_round_is_read_back_not_trained_again(tmp_path, role_suites):
    """As a resumed run sees it: the check's round is in the archive, so deciding again trains
    nothing and gives the same verdict."""
    from metarl.discovery.races import Races

    _, _, events, _ = run(
        tmp_path / "a.db", config(budget=3, stability=5.0), validation_gain=1.0, long_gain=-1.0
    )
    [check] = [d for kind, d in events if kind == "stability"]

    class NoTraining:
        def evaluate(self, *args, **kwargs):
            raise AssertionError("an archived stability round was trained again")

    seen = []
    with Archive(tmp_path / "a.db") as archive:
        races = Races(
            archive,
            config(stability=5.0).resolved(),
            NoTraining(),
            None,
            "r1",
            ["CartPole-v1:gravity=15.0+force_mag=7.0", "Acrobot-v1"],
            lambda kind, data: seen.append((kind, data)),
        )
        assert races.stable(check["incumbent"], check["id"]) is False
    assert [d["verdict"] for kind, d in seen if kind == "stability"] == ["worse"]


def test_stability_must_be_a_multiple_above_one(role_suites):
    from metarl.discovery.config import ConfigError

    with pytest.raises(ConfigError, match="stability is 0.5"):
        config(stability=0.5).resolved()
    assert config().resolved().stability == 5.0  # the quick protocol's
    assert config(stability=0).resolved().stability == 0.0


def test_a_race_an_evaluator_fault_stopped_is_run_again_after_the_next_generation(
    tmp_path, role_suites
):
    """The first validation round fails with an evaluator fault (as minatar-cpu's Seaquest
    baseline timed out): no verdict, so the challenger is raced again after generation 2,
    first, and wins there (it is clearly better on validation); generation 2's child then
    races the new incumbent."""
    void = [1]
    _, rows, events, log = run(tmp_path / "a.db", config(), validation_gain=1.0, void=void)
    assert void == [0]
    faults = [
        d["text"] for kind, d in events if kind == "status" and "evaluator fault" in d["text"]
    ]
    assert len(faults) == 1 and "races again after the next generation" in faults[0]
    challenger = faults[0].split("'")[0]
    races = decided(events)
    assert races[0]["id"] == challenger and races[0]["verdict"] == "better"
    generation = {r["id"]: r["generation"] for r in rows}
    assert generation[challenger] == 1
    incumbents = [d["incumbent"] for kind, d in events if kind == "generation"]
    assert incumbents[0] != challenger  # generation 1 kept the seed
    # crowned after generation 2, before that generation's own child raced it
    assert races[1]["incumbent"] == challenger and generation[races[1]["id"]] == 2


def test_a_fault_that_persists_stops_retrying_after_the_attempts(tmp_path, role_suites):
    """Every validation round fails: the generation-1 challenger is attempted twice
    (CONTEST_ATTEMPTS), then left; the seed stays the incumbent and the run finishes."""
    from metarl.discovery.races import CONTEST_ATTEMPTS

    result, _, events, _ = run(
        tmp_path / "a.db", config(budget=9), validation_gain=1.0, void=[10**6]
    )
    assert result.status == "finished"
    faults = [
        d["text"] for kind, d in events if kind == "status" and "evaluator fault" in d["text"]
    ]
    first = faults[0].split("'")[0]
    attempts = [text for text in faults if text.startswith(f"{first}'")]
    assert len(attempts) == CONTEST_ATTEMPTS and "not raced again" in attempts[-1]
    assert not [d for kind, d in events if kind == "confirm"]  # no round ever scored
    with Archive(tmp_path / "a.db", must_exist=True) as archive:
        state = archive.get_run(result.run_id)["state"]
    assert state["voided"][first]["attempts"] == CONTEST_ATTEMPTS


def test_a_voided_race_is_retried_by_a_resumed_run(tmp_path, role_suites):
    """A run that ends right after the voided race keeps it in its state; resumed with more
    budget, it races that challenger again after its next generation."""
    cfg = config(budget=3)
    void = [1]
    result, _, events, _ = run(tmp_path / "a.db", cfg, validation_gain=1.0, void=void)
    faults = [
        d["text"] for kind, d in events if kind == "status" and "evaluator fault" in d["text"]
    ]
    challenger = faults[0].split("'")[0]
    log, again = [], []
    with Archive(tmp_path / "a.db") as archive:
        DiscoveryLoop(
            archive,
            cfg.__class__(**{**cfg.to_dict(), "budget": 6}),
            MutationProposer(),
            resume=result.run_id,
            on_event=lambda kind, data: again.append((kind, data)),
            evaluator_factory=lambda settings, workers: RoleEvaluator(
                settings, log, validation_gain=1.0, void=void
            ),
        ).run()
    races = decided(again)
    assert races[0]["id"] == challenger and races[0]["verdict"] == "better"
