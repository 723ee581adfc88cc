"""Training datasets from the archive (grpo/export.py, `metarl export RUN --format
sft|dpo|grpo`): each layout loads with `datasets` as trl's trainers read it, dpo pairs are
siblings ordered by their selection scores with a margin and never by a test score, hostile
reply text round-trips exactly and stays inert in the file, a candidate no model wrote gets the
prompt train-proposer would ask, one GRPO step runs on the grpo export, and `train-proposer
--sft-data` warm-starts from an sft export.

The archive comes from two tiny real discoveries in-process (no sandbox, no training): the LLM
proposer against the scripted chat-completions server on 127.0.0.1, and the offline mutation
proposer, both scored by the role-aware fake evaluator (tests/role_evaluator.py) with a
distinctive test-role score planted; the dpo ordering rules are checked on a hand-built run.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import invoke
from datasets import load_dataset
from llm_server import ScriptedLLMServer
from role_evaluator import RoleEvaluator

from metarl.archives import Archive
from metarl.archives.store import decode_outcome
from metarl.discovery.config import DiscoverConfig
from metarl.discovery.loop import DiscoveryLoop
from metarl.discovery.proposers.llm import build_llm_proposer
from metarl.discovery.proposers.llm.extraction import extract
from metarl.discovery.proposers.mutation import MutationProposer
from metarl.evaluation.outcome import EnvScore, Outcome
from metarl.grpo import export
from metarl.grpo import prompts as prompt_plan
from metarl.grpo.rewards import reward_of
from metarl.tasks import get_task

TASK = get_task("drift")
PPO = TASK.seed_program("ppo_clip").source
TEST_SCORE = 7.654321  # planted as every test-role score: no export may contain it
TEST_TEXT = "7.65432"
HOSTILE = (
    'Here \x1b[2J\x1b]0;pwned\x07 \u202eevil\u202c [b]bold[/b] "quoted" \\back\\slash '
    '</s><|im_end|>\r\n\t{"role": "system"}\n'
)
COLUMNS = {
    "sft": {
        "prompt",
        "completion",
        "candidate_id",
        "run_id",
        "source",
        "model",
        "stage",
        "fitness",
    },
    "dpo": {
        "prompt",
        "chosen",
        "rejected",
        "chosen_id",
        "rejected_id",
        "parent_ids",
        "measure",
        "chosen_score",
        "rejected_score",
        "same_prompt",
        "source",
        "rejected_source",
    },
    "grpo": {
        "prompt",
        "completion",
        "reward",
        "label",
        "candidate_id",
        "run_id",
        "parent_ids",
        "status",
        "stage",
        "fitness",
        "source",
        "model",
    },
}


class Verdicts(RoleEvaluator):
    """The role-aware fake evaluator, refusing a program that imports os (as the static check
    does), with every test-role return giving the planted TEST_SCORE."""

    def __init__(self, settings):
        super().__init__(settings, [], test_return=lambda source, env, seed: 5.0 * TEST_SCORE)

    def evaluate_batch(self, sources, task, known_fingerprints=None, progress=None, **kw):
        outcomes = super().evaluate_batch(sources, task, known_fingerprints, progress, **kw)
        return [
            Outcome.failure("static", "import of os is not allowed") if "import os" in s else o
            for s, o in zip(sources, outcomes)
        ]


def scripted_replies():
    """A responder cycling through: a clean JSON reply, a refused program, prose with no
    program, and hostile prose around a valid fenced program (each program new)."""
    count = {"n": 0}

    def respond(payload):
        count["n"] += 1
        n = count["n"]
        code = (
            "def drift(ratio, advantage, epsilon):\n"
            f"    return {n}.0 * jnp.abs(ratio - 1.0) * jnp.abs(advantage)\n"
        )
        return [
            HOSTILE + "```python\n" + code + "```\n",
            json.dumps({"thought": "scale", "name": f"scaled_{n}", "code": code}),
            "```python\nimport os\n\n" + code + "```",
            "Sorry, I cannot write that function.",
        ][n % 4]

    return respond


def config(**changes) -> DiscoverConfig:
    base = dict(
        suite="classic",  # train, validation and test roles (the fake evaluator trains nothing)
        timesteps=8192,
        seeds=1,
        seed_values=[0],
        max_time=None,
        islands=1,
        children=4,
        budget=8,
        confirm=True,
        heldout=True,
        guidance_every=0,
        rng_seed=4,
        max_concurrency=1,
    )
    return DiscoverConfig(**{**base, **changes})


def discover(archive: Archive, cfg: DiscoverConfig, proposer) -> str:
    loop = DiscoveryLoop(
        archive, cfg, proposer, evaluator_factory=lambda settings, workers: Verdicts(settings)
    )
    result = loop.run()
    assert result.status == "finished"
    return result.run_id


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, str, str]:
    """(archive, LLM run, mutation run)."""
    path = tmp_path_factory.mktemp("export") / "metarl.db"
    with ScriptedLLMServer(responder=scripted_replies()) as server, Archive(path) as archive:
        proposer = build_llm_proposer(
            {
                "models": ["openai/scripted"],
                "api_base": server.api_base,
                "timeout_s": 10,
                "max_concurrency": 1,
                "edit_forms": {"rewrite": 1.0},
                "repair_rounds": 0,
            }
        )
        llm = discover(archive, config(proposer="llm", models=["openai/scripted"]), proposer)
        mutation = discover(archive, config(budget=6), MutationProposer())
    return path, llm, mutation


@pytest.fixture
def archive(runs, tmp_path):
    copy = tmp_path / "metarl.db"
    shutil.copy(runs[0], copy)
    with Archive(copy) as store:
        yield store


def load(path: Path) -> list[dict]:
    return list(load_dataset("json", data_files=str(path), split="train"))


def exported(archive: Archive, run_id: str, fmt: str, tmp_path: Path, **options) -> list[dict]:
    path = tmp_path / f"{run_id}-{fmt}.jsonl"
    result = export.export_dataset(archive, run_id, fmt, path, **options)
    rows = load(path)
    assert result.rows == len(rows) and result.from_calls + result.rendered == len(rows)
    return rows


def children(archive: Archive, run_id: str) -> list[dict]:
    return [row for row in archive.run_candidates(run_id) if not row["is_seed"]]


# -- the layouts -------------------------------------------------------------------------------


def test_each_format_loads_with_datasets_with_the_expected_columns_and_counts(
    archive, runs, tmp_path
):
    _, llm, _ = runs
    candidates = archive.run_candidates(llm)
    statuses = sorted({c["status"] for c in candidates})
    assert statuses == ["failed", "no_code", "passed"]  # the script's every kind of reply
    for fmt in export.FORMATS:
        rows = exported(archive, llm, fmt, tmp_path)
        assert rows and set(rows[0]) == COLUMNS[fmt], fmt
        for row in rows:  # conversational: chat messages, the reply one assistant message
            assert row["prompt"][0]["role"] == "system" and row["prompt"][-1]["role"] == "user"
            for column in {"sft": ["completion"], "dpo": ["chosen", "rejected"]}.get(fmt, []):
                assert [m["role"] for m in row[column]] == ["assistant"]
    sft = exported(archive, llm, "sft", tmp_path)
    passed = [c["id"] for c in candidates if c["status"] == "passed"]
    assert [row["candidate_id"] for row in sft] == passed  # one per passing candidate
    assert all(row["completion"][0]["role"] == "assistant" for row in sft)
    grpo = exported(archive, llm, "grpo", tmp_path)
    assert [row["candidate_id"] for row in grpo] == [c["id"] for c in candidates]
    by_id = {row["candidate_id"]: row for row in grpo}
    for candidate in candidates:  # seeds: no call, rendered; children: their archived call
        row = by_id[candidate["id"]]
        assert row["source"] == ("rendered" if candidate["is_seed"] else "call")
        if not candidate["is_seed"]:
            call = archive.calls(candidate["id"])[-1]
            assert row["prompt"] == call["prompt"] and row["model"] == "openai/scripted"
            assert row["completion"] == [{"role": "assistant", "content": call["reply"]}]


def test_the_sft_export_keeps_replies_that_passed_the_minimum_stage(archive, runs, tmp_path):
    _, llm, _ = runs
    candidates = {c["id"]: c for c in archive.run_candidates(llm)}
    passed = {cid for cid, c in candidates.items() if c["status"] == "passed"}
    refused = {cid for cid, c in candidates.items() if c["stage"] == "static"}
    assert refused and not refused & passed
    parsed = exported(archive, llm, "sft", tmp_path, min_stage="parse")
    assert {row["candidate_id"] for row in parsed} == passed | refused  # never the no-code ones
    with pytest.raises(export.ExportOptionError, match="unknown stage 'trained'"):
        export.sft_rows(archive, llm, min_stage="trained")


def test_grpo_rewards_are_the_staged_reward_of_each_archived_verdict(archive, runs, tmp_path):
    _, llm, _ = runs
    rows = exported(archive, llm, "grpo", tmp_path)
    for row in rows:
        outcome = decode_outcome(archive.candidate(row["candidate_id"])).selection_view()
        assert (row["reward"], row["label"]) == reward_of(outcome)
    labels = {row["label"] for row in rows}
    assert labels == {"scored", "static", "no-program"}
    assert min(r["reward"] for r in rows if r["label"] == "scored") > max(
        r["reward"] for r in rows if r["label"] != "scored"
    )


def test_a_mutation_run_exports_the_prompts_train_proposer_would_ask(archive, runs, tmp_path):
    _, _, mutation = runs
    for fmt in export.FORMATS:
        rows = exported(archive, mutation, fmt, tmp_path)
        assert rows and {row["source"] for row in rows} == {"rendered"}, fmt
    for row in exported(archive, mutation, "sft", tmp_path):
        candidate = archive.candidate(row["candidate_id"])
        parents = tuple(candidate["parent_ids"] or ())
        operator = {0: "fresh", 1: "rewrite"}.get(len(parents), "crossover")
        spec = prompt_plan.PromptSpec("x", operator, parents)
        assert row["prompt"] == prompt_plan.render(archive, TASK, spec)
        assert row["prompt"][0]["content"] == prompt_plan.prompts.system_prompt(TASK)
        # the completion is in the LLM proposer's reply format: its extraction finds the code
        reply = extract(row["completion"][0]["content"], TASK.function_name)
        assert reply.code.strip() == candidate["code"].strip()


# -- dpo ---------------------------------------------------------------------------------------


def test_dpo_pairs_are_siblings_ordered_by_score_with_a_margin(archive, runs, tmp_path):
    for run_id in runs[1:]:
        rows = exported(archive, run_id, "dpo", tmp_path)
        candidates = {c["id"]: c for c in archive.run_candidates(run_id)}
        for row in rows:
            chosen, rejected = candidates[row["chosen_id"]], candidates[row["rejected_id"]]
            assert chosen["parent_ids"] == rejected["parent_ids"] == row["parent_ids"]
            assert chosen["status"] == "passed"
            if rejected["status"] == "passed":
                assert row["measure"] in ("validation", "confirmed", "fitness")
                assert row["chosen_score"] > row["rejected_score"] + export.MARGIN
            else:
                assert row["measure"] == "passed" and row["rejected_score"] is None
        # every passing sibling pair further apart than the margin on training fitness is there
        expected = {
            (a["id"], b["id"])
            for a in candidates.values()
            for b in candidates.values()
            if a["parent_ids"]
            and a["parent_ids"] == b["parent_ids"]
            and a["status"] == b["status"] == "passed"
            and a["validation"] is None
            and a["fitness"] > b["fitness"] + export.MARGIN
        }
        assert expected <= {(row["chosen_id"], row["rejected_id"]) for row in rows}
    # with a margin no two passing siblings clear, only the failed siblings are rejected
    llm = runs[1]
    wide = exported(archive, llm, "dpo", tmp_path, margin=10.0)
    assert wide and {row["measure"] for row in wide} == {"passed"}


def scored(fitness: float, validation: float | None = None, confirmed: float | None = None):
    """A passing outcome with a planted test-role score."""
    test = EnvScore(
        env="SpaceInvaders-MinAtar",
        seeds=[0],
        total_timesteps=8192,
        returns=[1.0],
        mean=1.0,
        std=0.0,
        normalised=TEST_SCORE,
        baseline_mean=1.0,
        random_mean=0.0,
        role="test",
    )
    return Outcome(
        passed=True,
        stage="full",
        fitness=fitness,
        heldout=TEST_SCORE,
        validation=validation,
        env_scores=[test],
    )


@pytest.fixture
def family(tmp_path):
    """A run whose parent has children of every kind: scored on validation, on training only,
    within the margin of another, failed, a duplicate and an evaluator fault; two children
    were asked in another prompt."""
    store = Archive(tmp_path / "family.db")
    run_id = store.create_run(task="drift", suite="classic", method="discovery")

    def add(seq, outcome, parents=("r1-0",), prompt="the parent's prompt", confirmed=None):
        code = PPO if seq == 0 else PPO.replace("epsilon", f"({seq} * epsilon)", 1)
        row = {
            "id": f"{run_id}-{seq}",
            "run_id": run_id,
            "seq": seq,
            "task": "drift",
            "suite": "classic",
            "hash": f"h{seq}",
            "code": code,
            "name": f"c{seq}",
            "thought": "t",
            "parent_ids": list(parents),
            "generation": 1 if parents else 0,
            "is_seed": 0 if parents else 1,
            "proposer": "llm:m" if parents else "seed",
        }
        calls = []
        if parents:
            reply = json.dumps({"thought": "t", "name": f"c{seq}", "code": code})
            messages = [{"role": "user", "content": prompt}]
            calls = [{"model": "m", "prompt": messages, "reply": reply}]
        store.record_candidate(row, outcome, calls=calls)
        if confirmed is not None:
            with store.transaction() as db:
                db["candidates"].update(row["id"], {"confirmed_fitness": confirmed})

    add(0, scored(1.0), parents=())
    add(1, scored(1.0, validation=1.5))  # worst on training, best on validation
    add(2, scored(1.4, validation=1.2))
    add(3, scored(1.3), confirmed=1.1, prompt="a later prompt")
    add(4, scored(1.38))  # within the margin of 2 on training fitness
    add(5, Outcome.failure("probes", "NaN loss"))
    add(6, Outcome.failure("probes", "same as r1-2", duplicate_of="r1-2"))
    add(7, Outcome.evaluator_fault("the sandbox never started"))
    add(8, scored(1.2), prompt="a later prompt", parents=("r1-0", "r1-2"))  # other parents
    yield store, run_id
    store.close()


def test_dpo_compares_siblings_on_the_most_trusted_score_both_have(family, tmp_path):
    store, run_id = family
    rows = exported(store, run_id, "dpo", tmp_path)
    pairs = {(r["chosen_id"][3:], r["rejected_id"][3:]): r for r in rows}
    assert sorted(pairs) == sorted(
        [
            ("1", "2"),  # validation 1.5 > 1.2, though 1's training fitness is the worst
            ("2", "3"),  # training fitness 1.4 > 1.3 (3 alone is confirmed)
            ("3", "1"),  # training fitness 1.3 > 1.0
            ("4", "1"),
            ("4", "3"),  # 1.38 > 1.3 + 0.05; 2 over 4 (1.4 vs 1.38) is within the margin
            ("1", "5"),  # a failed sibling ranks below every passing one
            ("2", "5"),
            ("3", "5"),
            ("4", "5"),
        ]
    )
    assert pairs["1", "2"]["measure"] == "validation" and pairs["2", "3"]["measure"] == "fitness"
    assert (pairs["1", "2"]["chosen_score"], pairs["1", "2"]["rejected_score"]) == (1.5, 1.2)
    assert pairs["1", "5"]["measure"] == "passed" and pairs["1", "5"]["rejected_score"] is None
    # the prompt is the chosen one's; whether the rejected reply answered it is recorded
    assert pairs["3", "1"]["prompt"][0]["content"] == "a later prompt"
    assert not pairs["3", "1"]["same_prompt"] and pairs["1", "2"]["same_prompt"]
    assert [m["role"] for m in pairs["1", "2"]["chosen"]] == ["assistant"]
    # with confirmation on both sides the confirmed fitness decides: 2 (1.35) over 3 (1.1)
    with store.transaction() as db:
        db["candidates"].update(f"{run_id}-2", {"validation": None, "confirmed_fitness": 1.35})
    again = {(r.chosen_id[3:], r.rejected_id[3:]): r for r in export.dpo_pairs(store, run_id)}
    assert again["2", "3"].measure == "confirmed"
    assert (again["2", "3"].chosen_score, again["2", "3"].rejected_score) == (1.35, 1.1)


def test_no_export_carries_a_test_role_score(archive, runs, family, tmp_path):
    store, family_run = family
    planted = [c for c in archive.run_candidates(runs[1]) if c["heldout"] == TEST_SCORE]
    assert planted  # the LLM run's seeds have the planted test score
    assert store.candidate(f"{family_run}-1")["heldout"] == TEST_SCORE
    for source, run_id in ((archive, runs[1]), (archive, runs[2]), (store, family_run)):
        for fmt in export.FORMATS:
            path = tmp_path / f"{run_id}-{fmt}.jsonl"
            export.export_dataset(source, run_id, fmt, path)
            assert TEST_TEXT not in path.read_text(), (run_id, fmt)


def test_grpo_leaves_out_evaluator_faults_and_counts_what_it_skips(family, tmp_path):
    store, run_id = family
    with store.transaction() as db:  # a model that never answered: no reply to learn from
        db["calls"].insert(
            {"run_id": run_id, "candidate_id": f"{run_id}-9", "model": "m", "error": "429"}
        )
        db["candidates"].insert(
            {"id": f"{run_id}-9", "run_id": run_id, "seq": 9, "status": "no_code"}
        )
    result = export.export_dataset(store, run_id, "grpo", tmp_path / "g.jsonl")
    rows = load(tmp_path / "g.jsonl")
    ids = [row["candidate_id"][3:] for row in rows]
    assert ids == ["0", "1", "2", "3", "4", "5", "6", "8"]  # 7: the evaluator's fault
    assert result.skipped == 1
    assert {row["label"] for row in rows if row["candidate_id"].endswith("-6")} == {"duplicate"}


# -- hostile text ------------------------------------------------------------------------------


def test_hostile_reply_text_round_trips_exactly_and_stays_inert_in_the_file(
    archive, runs, tmp_path
):
    _, llm, _ = runs
    hostile = [
        c["id"]
        for c in children(archive, llm)
        if HOSTILE in (archive.calls(c["id"])[-1]["reply"] or "")
    ]
    assert hostile
    for fmt in export.FORMATS:
        path = tmp_path / f"{fmt}.jsonl"
        export.export_dataset(archive, llm, fmt, path)
        raw = path.read_bytes()
        assert raw.isascii() and b"\x1b" not in raw and b"\r" not in raw  # escaped, inert
        assert len(raw.splitlines()) == len(load(path))  # a newline in text never splits a row
    rows = {r["candidate_id"]: r for r in load(tmp_path / "sft.jsonl")}
    for cid in hostile:
        reply = archive.calls(cid)[-1]["reply"]
        assert rows[cid]["completion"][0]["content"] == reply  # exactly, through datasets
        assert HOSTILE in reply


# -- the command line --------------------------------------------------------------------------


def one_line_error(result, fragment: str, code: int) -> None:
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("metarl export: error: "), result.stderr
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in result.output


def test_the_command_writes_the_dataset_and_prints_one_line(runs, tmp_path, monkeypatch):
    path, llm, _ = runs
    out = tmp_path / "sft.jsonl"
    result = invoke("export", llm, "--format", "sft", "-o", str(out), "--archive", str(path))
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"wrote {len(load(out))} sft rows to {out}")
    monkeypatch.chdir(tmp_path)  # the default file: RUN-FORMAT.jsonl here
    result = invoke("export", llm, "--format", "dpo", "--margin", "0.1", "--archive", str(path))
    assert result.exit_code == 0, result.output
    assert load(tmp_path / f"{llm}-dpo.jsonl") and f"{llm}-dpo.jsonl" in result.stdout
    result = invoke("export", llm, "--archive", str(path))  # json, as before
    assert result.exit_code == 0 and json.loads(result.stdout)["run"]["id"] == llm


def test_the_command_gives_one_line_errors(runs, tmp_path):
    path, llm, mutation = runs
    db = ["--archive", str(path)]
    one_line_error(invoke("export", "r9", "--format", "sft", *db), "no run 'r9'", 1)
    one_line_error(invoke("export", llm, "--format", "xml", *db), "unknown format 'xml'", 2)
    one_line_error(
        invoke("export", mutation, "--format", "dpo", "--margin", "5", *db),
        f"run {mutation} has no dpo rows",
        1,
    )
    one_line_error(invoke("export", llm, "--format", "sft", "--margin", "0.1", *db), "--margin", 2)
    one_line_error(
        invoke("export", llm, "--format", "sft", "--min-stage", "x", *db), "unknown stage", 2
    )
    one_line_error(invoke("export", llm, "--format", "dpo", "--margin", "-1", *db), "margin", 2)
    one_line_error(
        invoke("export", llm, "--format", "grpo", "-o", str(tmp_path / "no" / "g.jsonl"), *db),
        "does not exist",
        2,
    )
    one_line_error(
        invoke("export", llm, "--format", "grpo", "--archive", str(tmp_path / "none.db")),
        "no archive at",
        1,
    )


# -- GRPO on the export, and the warm start from it --------------------------------------------


def test_one_grpo_step_runs_on_the_grpo_export_with_a_tiny_model(archive, runs, tmp_path):
    """trl's GRPOTrainer reads the export's prompts; the scripted rollout answers them with
    the archived completions (a random tiny model writes no program) and the reward function
    reads the archived `reward` column trl passes to it."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental
    import torch  # lazy: only this test needs torch and trl
    from tiny_proposer import build_tiny_proposer, scripted_rollout
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from metarl.grpo.rewards import completion_text

    path = tmp_path / "grpo.jsonl"
    export.export_dataset(archive, runs[1], "grpo", path)
    data = load_dataset("json", data_files=str(path), split="train")
    data = data.filter(lambda row: row["label"] in ("scored", "static"))
    archived = {completion_text(row["completion"]): row["reward"] for row in data}
    assert len(set(archived.values())) > 1
    calls = []

    def archived_reward(prompts, completions, reward, label, source, **kwargs):
        calls.append((list(reward), list(label), list(source)))
        return [archived[completion_text(c)] for c in completions]

    model_dir = build_tiny_proposer(tmp_path / "tiny")
    network = AutoModelForCausalLM.from_pretrained(model_dir)
    before = {n: p.detach().clone() for n, p in network.named_parameters()}
    trainer = GRPOTrainer(
        model=network,
        reward_funcs=archived_reward,
        args=GRPOConfig(
            output_dir=str(tmp_path / "out"),
            max_steps=1,
            logging_steps=1,
            num_generations=2,
            per_device_train_batch_size=2,
            max_completion_length=64,
            learning_rate=1e-3,
            use_cpu=True,
            bf16=False,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
            seed=0,
        ),
        train_dataset=data,
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        rollout_func=scripted_rollout([completion_text(row["completion"]) for row in data]),
    )
    trainer.train()
    assert trainer.state.global_step == 1 and len(calls) == 1
    rewards, labels, sources = calls[0]
    assert set(labels) <= {"scored", "static"} and set(sources) <= {"call", "rendered"}
    assert all(isinstance(r, float) for r in rewards)
    logged = trainer.state.log_history[0]
    assert logged["reward_std"] > 0 and torch.isfinite(torch.tensor(logged["loss"]))
    assert any(not torch.equal(before[n], p) for n, p in network.named_parameters())


def test_the_warm_start_reads_an_sft_export(archive, runs, tmp_path, monkeypatch):
    from metarl.grpo import train  # lazy: imports torch and trl
    from metarl.grpo.settings import GRPOSettings

    path = tmp_path / "sft.jsonl"
    export.export_dataset(archive, runs[1], "sft", path)
    rows = export.read_sft_rows(path)
    expected = [{"prompt": r["prompt"], "completion": r["completion"]} for r in load(path)]
    assert rows == expected and all(set(row) == {"prompt", "completion"} for row in rows)

    taken = []
    monkeypatch.setattr(train, "warm_start", lambda network, tok, rows, **kw: taken.append(rows))
    monkeypatch.setattr(train, "save_checkpoint", lambda *args: None)
    settings = GRPOSettings(suite="smoke", sft_data=str(path), output_dir=str(tmp_path / "p"))
    training = train.ProposerTraining(settings.resolved(), archive)
    training._warm_start("network", "tokenizer", plan=None)
    assert taken == [rows]
    # it defines the training: a run warm-started from a file never resumes as one without
    assert settings.hash() != GRPOSettings(suite="smoke", output_dir=settings.output_dir).hash()


def test_a_bad_sft_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "just text", "completion": "no messages"}\n')
    with pytest.raises(export.ExportOptionError, match="bad.jsonl:1 has no conversational"):
        export.read_sft_rows(bad)
    result = invoke("train-proposer", "--sft-data", str(tmp_path / "missing.jsonl"))
    assert result.exit_code == 2 and "cannot read the sft data" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
