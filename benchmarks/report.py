"""How long `metarl report` takes, and how big its page gets, on a 10k-candidate archive.

    python benchmarks/report.py                    # 10,000 discovery candidates + a small ES run
    python benchmarks/report.py --candidates 1000  # a quicker look
    python benchmarks/report.py --profile          # + cProfile's top functions of one report

Why: a long LLM discovery run archives thousands of candidates, each with its code, its
outcome, its evaluations' learning curves and its LLM calls, and the report has to stay quick
to make and small enough to open in a browser. Nothing here trains anything: the archive is
synthetic, written in bulk in one transaction, with the rows a real run writes (checked first
against the archive's own encoders, `columns.outcome_columns` and `columns.evaluation_rows`):

1. one finished discovery run (`--proposer llm`, task drift on MinAtar-like envs, four
   training envs and one held out, 4 seeds at 1e7 steps) of `--candidates` proposals after the
   task's seed programs, with a realistic mix of fates (no program, duplicate, failed static
   check / probes / short / full run, passed) and reasons; every candidate has parents, a
   thought, code, an outcome and one LLM call (two models, alternating), every evaluated one
   its learning curves (64 points, with the seed spread), some elites a confirmation;
2. one finished ES run (`method='es'`) of `--candidates / 50` exports, with its
   per-generation history in the run state.

Then `write_report` is timed `--repeats` times on the discovery run alone and on both runs
compared. The table gives the median seconds, the page size, and the size without the
embedded plotly.js (the part that grows with the data); a second table splits one single-run
report into reading the story from the archive and rendering the page.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import math
import os
import pstats
import random
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import plotly.offline

from metarl.archives.columns import encode_row, evaluation_rows, outcome_columns
from metarl.archives.store import Archive
from metarl.evaluation.outcome import Outcome
from metarl.platform import device_description, library_versions
from metarl.report.page import render, write_report
from metarl.report.settings import ReportSettings
from metarl.report.story import run_story
from metarl.tasks import get_task
from metarl.tasks.candidate import source_hash

TRAIN_ENVS = ("Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "SpaceInvaders-MinAtar")
HELDOUT_ENVS = ("CartPole-v1",)
# env -> (random policy's mean return, baseline program's mean return)
REFERENCES = {
    "Asterix-MinAtar": (0.5, 14.0),
    "Breakout-MinAtar": (0.6, 40.0),
    "Freeway-MinAtar": (0.0, 55.0),
    "SpaceInvaders-MinAtar": (2.5, 110.0),
    "CartPole-v1": (22.0, 490.0),
}
SEEDS = [0, 1, 2, 3]
CONFIRM_SEEDS = list(range(16))
FULL_STEPS = 10_000_000
SHORT_STEPS = 1_000_000
CURVE_POINTS = 64
EVAL_KEY = "e3b0c44298fc1c14"
MODELS = ("openai/gpt-4.1-mini", "anthropic/claude-sonnet-4")
START = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)
VERSIONS = {"metarl": "0.1.0", "jax": "0.9.2", "jaxlib": "0.9.2", "gymnax": "0.0.9"}
DEVICE = "jax-cuda12-plugin; host AMD EPYC 7B13 x16"
# cumulative shares of the proposals' fates: (share, status, stage)
FATES = (
    (0.08, "no_code", "propose"),
    (0.13, "duplicate", "dedup"),
    (0.28, "failed", "static"),
    (0.38, "failed", "probes"),
    (0.53, "failed", "short"),
    (0.55, "failed", "full"),
    (1.00, "passed", "full"),
)
REASONS = {
    "propose": [
        "the reply held no ```python block",
        "the reply's code block defines no function `drift`",
        "LLM call failed: timeout after {n} s",
        "LLM call failed: rate limited (HTTP 429), retried {n} times",
    ],
    "static": [
        "imports {mod}, which the contract does not allow (allowed: jax, jax.numpy, math)",
        "SyntaxError: invalid syntax (line {n})",
        "`drift` takes {n} arguments; the contract's signature is drift(ratio, advantage, epsilon)",
        "uses a Python `while` loop at line {n}: not traceable under jit",
        "calls `{mod}.random` at line {n}: candidates must be deterministic",
    ],
    "probes": [
        "drift is negative on {n} of 4096 probe points (min -{x}): a drift must be >= 0",
        "drift is not zero at ratio = 1 (max |drift| {x} on {n} probe points)",
        "output shape ({n},) differs from the input shape (4096,)",
        "NaN on {n} of 4096 probe points (e.g. ratio=0.0, advantage=-1.2)",
        "gradient w.r.t. ratio is not finite on {n} probe points",
    ],
    "short": [
        "the loss became NaN at update {n} on {env}\nTraceback (most recent call last): ...",
        "normalised score {x} on the short run is below the 0.25 gate",
        "timed out after {n} s on the short run ({env})",
        "worker exited with signal 9 (out of memory) on {env}",
    ],
    "full": [
        "the loss became NaN at update {n} on {env}",
        "timed out after {n} s on the full run ({env})",
    ],
}
THOUGHTS = (
    "Tighten the trust region where advantages are large, loosen it where they are small.",
    "Replace the hard clip by a smooth tanh penalty so gradients never vanish.",
    "Asymmetric clipping: punish ratio increases on negative advantages harder.",
    "Scale the drift by |advantage| so that confident updates move further.",
    "Add a small quadratic term in log-ratio, like a KL penalty, on top of the clip.",
    "Mirror-learning drift with an epsilon that shrinks with the advantage's magnitude.",
)
OPERATORS = ("mutate", "mutate", "mutate", "crossover", "explore")


def child_code(params: list[float], name: str, thought: str) -> str:
    """A drift program of about 15 lines from its eight coefficients."""
    a, b, c, d, e, f, g, h = (f"{p:.4g}" for p in params)
    return (
        "import jax\n"
        "import jax.numpy as jnp\n"
        "\n"
        "\n"
        "def drift(ratio, advantage, epsilon):\n"
        f'    """{name}: {thought}"""\n'
        "    log_ratio = jnp.log(jnp.maximum(ratio, 1e-8))\n"
        f"    clipped = jnp.clip(ratio, 1.0 - {a} * epsilon, 1.0 + {b} * epsilon)\n"
        f"    scale = {c} * jnp.tanh({d} * log_ratio)\n"
        "    outside = jax.nn.relu((ratio - clipped) * advantage)\n"
        f"    penalty = {e} * jnp.square(log_ratio - scale)\n"
        f"    tilt = {f} * jnp.abs(advantage) * jnp.square(log_ratio)\n"
        "    out = outside + penalty + tilt\n"
        f"    gate = jnp.abs(advantage) > {g}\n"
        f"    return jnp.where(gate, out, {h} * out)\n"
    )


def es_code(generation: int, weights: list[float]) -> str:
    """An ES export: a small network whose weights are literals in the source."""
    rows = [weights[i : i + 12] for i in range(0, len(weights), 12)]
    body = ",\n".join("        [" + ", ".join(f"{w:.5f}" for w in row) + "]" for row in rows)
    return (
        "import jax\nimport jax.numpy as jnp\n\n"
        f"# LPONetwork: ES mean after generation {generation}\n"
        "W1 = jnp.array(\n    [\n" + body + "\n    ]\n)\n\n\n"
        "def drift(ratio, advantage, epsilon):\n"
        "    x = jnp.stack([ratio - 1.0, jnp.log(ratio), advantage, epsilon + 0 * ratio], -1)\n"
        "    h = jnp.tanh(x @ W1[:4].T)\n"
        "    return jax.nn.relu(h.sum(-1) * jnp.abs(advantage))\n"
    )


def reason_of(rng: random.Random, stage: str) -> str:
    template = rng.choice(REASONS[stage])
    return template.format(
        n=rng.randint(2, 600),
        x=f"{rng.uniform(0, 2):.3g}",
        env=rng.choice(TRAIN_ENVS),
        mod=rng.choice(("os", "numpy", "subprocess", "random", "torch")),
    )


class Curves:
    """Pools of curve shapes and noise: 64-point learning curves cheaply, without a Gaussian
    draw per point (the full-precision floats a trainer's float32 -> float gives)."""

    def __init__(self, rng: random.Random):
        self.steps = {
            budget: [budget * (i + 1) // CURVE_POINTS for i in range(CURVE_POINTS)]
            for budget in (SHORT_STEPS, FULL_STEPS)
        }
        self.shapes = [
            [1.0 - math.exp(-rate * (i + 1) / CURVE_POINTS) for i in range(CURVE_POINTS)]
            for rate in (2.5, 3.5, 4.5, 5.5, 6.5, 8.0)
        ]
        self.noise = [[rng.gauss(0, 1) for _ in range(CURVE_POINTS)] for _ in range(64)]

    def draw(self, rng: random.Random, low: float, mean: float, high: float) -> tuple:
        shape, noise = rng.choice(self.shapes), rng.choice(self.noise)
        wobble, spread = 0.02 * high, abs(rng.gauss(0.06, 0.02)) * high
        curve = [low + (mean - low) * p + wobble * z for p, z in zip(shape, noise)]
        return curve, [spread * p * (1.0 + 0.2 * z) for p, z in zip(shape, noise)]


def env_scores(
    rng: random.Random, curves: Curves, fitness: float, envs: tuple, budget: int, seeds: list
) -> list[dict]:
    """One evaluation's EnvScores (as `Outcome.to_dict` writes them) around `fitness`."""
    out = []
    for env in envs:
        low, high = REFERENCES[env]
        score = fitness + rng.gauss(0.0, 0.12)
        mean = low + score * (high - low)
        returns = [mean + rng.gauss(0.0, 0.08 * (high - low)) for _ in seeds]
        width = abs(rng.gauss(0.12, 0.04))
        curve, spread = curves.draw(rng, low, mean, high)
        out.append(
            {
                "env": env,
                "seeds": list(seeds),
                "total_timesteps": budget,
                "returns": returns,
                "mean": statistics.fmean(returns),
                "std": statistics.pstdev(returns),
                "normalised": score,
                "baseline_mean": high,
                "random_mean": low,
                "curve_steps": curves.steps[budget],
                "curve": curve,
                "curve_std": spread,
                "compile_s": rng.uniform(20, 40),
                "run_s": rng.uniform(60, 300) * budget / FULL_STEPS,
                "steps_per_s": rng.uniform(2e5, 6e5),
                "heldout": env in HELDOUT_ENVS,
                "stage": "full" if budget == FULL_STEPS else "short",
                "normalised_ci": [score - width, score + width],
                "published": (
                    {"learn-rl-algorithms": score * rng.uniform(0.8, 1.1)}
                    if env not in HELDOUT_ENVS
                    else {}
                ),
                "role": "test" if env in HELDOUT_ENVS else "train",
                "lr": None,
                # more left to learn where the score is lower (no rng draw: the stream, and so
                # every other number, stays as before)
                "positive_value_loss": max(0.0, 1.0 - score),
            }
        )
    return out


def outcome_data(
    rng: random.Random,
    curves: Curves,
    status: str,
    stage: str,
    fitness: float,
    seeds: list = SEEDS,
    duplicate_of: str | None = None,
) -> dict:
    """A candidate's Outcome for its fate, as `Outcome.to_dict` gives it."""
    data = {
        "passed": status == "passed",
        "stage": stage,
        "reason": None,
        "warnings": [],
        "env_scores": [],
        "fitness": None,
        "heldout": None,
        "fitness_ci": None,
        "heldout_ci": None,
        "validation": None,
        "validation_ci": None,
        "fingerprint": None,
        "duplicate_of": duplicate_of,
        "timings": {},
        "stdout": "",
        "sandbox": {},
        "seeds_pinned": False,
        "fault": "candidate",
    }
    if status == "no_code":
        return {**data, "reason": reason_of(rng, "propose")}
    timings = {"static": rng.uniform(0.005, 0.05)}
    if status == "duplicate":
        return {**data, "reason": f"the same program as {duplicate_of}", "timings": timings}
    if stage != "static":
        data["fingerprint"] = hashlib.sha256(str(rng.random()).encode()).hexdigest()[:16]
        data["sandbox"] = {"network": "unshare", "memory_mb": 8192, "exit": 0}
    if stage in ("short", "full"):
        timings["probes"] = rng.uniform(0.5, 3.0)
    scores: list[dict] = []
    if stage == "full":
        scores += env_scores(rng, curves, fitness, TRAIN_ENVS, SHORT_STEPS, seeds)
        timings["short"] = rng.uniform(40, 120)
    data.update(env_scores=scores, timings=timings)
    if status != "passed":
        reason = reason_of(rng, stage)
        data.update(reason=reason, stdout="step 0: loss nan\n" * 3 if "NaN" in reason else "")
        return data
    envs = TRAIN_ENVS + HELDOUT_ENVS
    scores += env_scores(rng, curves, fitness, envs, FULL_STEPS, seeds)
    timings["full"] = rng.uniform(300, 1500)
    timings["total"] = sum(timings.values())
    train = [s["normalised"] for s in scores if s["stage"] == "full" and not s["heldout"]]
    held = [s["normalised"] for s in scores if s["stage"] == "full" and s["heldout"]]
    fit, out = statistics.fmean(train), statistics.fmean(held)
    w1, w2 = abs(rng.gauss(0.08, 0.03)), abs(rng.gauss(0.15, 0.05))
    data.update(
        fitness=fit,
        heldout=out,
        fitness_ci=[fit - w1, fit + w1],
        heldout_ci=[out - w2, out + w2],
        warnings=["slow: the full run took over 10 minutes"] if rng.random() < 0.05 else [],
    )
    return data


def dumps(value) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


def candidate_columns(data: dict) -> dict:
    """`columns.outcome_columns` of the outcome `data`, encoded (as `record_candidate` writes)."""
    passed = data["passed"]
    if passed:
        status = "passed"
    elif data["duplicate_of"]:
        status = "duplicate"
    elif data["stage"] == "propose":
        status = "no_code"
    else:
        status = "failed"
    timings = data["timings"]
    eval_s = timings.get("total", sum(timings.values())) if timings else None
    columns = {
        **({"seeds": dumps(data["env_scores"][0]["seeds"])} if data["env_scores"] else {}),
        "status": status,
        "stage": data["stage"],
        "reason": data["reason"],
        "fitness": data["fitness"] if passed else None,
        "heldout": data["heldout"] if passed else None,
        "fingerprint": data["fingerprint"],
        "duplicate_of": data["duplicate_of"],
        "timings": dumps(timings),
        "eval_s": eval_s,
        "warnings": dumps(data["warnings"]),
        "outcome": dumps(data),
    }
    for score in ("fitness", "heldout"):
        low, high = data[f"{score}_ci"] if passed and data[f"{score}_ci"] else (None, None)
        columns.update({f"{score}_low": low, f"{score}_high": high})
    return columns


def evaluations_of(data: dict, cid: str, run_id: str, purpose: str, at: str) -> list[dict]:
    """`columns.evaluation_rows` of the outcome `data`, encoded."""
    return [
        {
            "candidate_id": cid,
            "run_id": run_id,
            "purpose": purpose,
            "env": env["env"],
            "stage": env["stage"],
            "heldout": int(bool(env["heldout"])),
            "role": env.get("role") or ("test" if env["heldout"] else "train"),
            "lr": env.get("lr"),
            "seeds": dumps(env["seeds"]),
            "total_timesteps": env["total_timesteps"],
            "returns": dumps(env["returns"]),
            "mean": env["mean"],
            "std": env["std"],
            "normalised": env["normalised"],
            "normalised_low": env["normalised_ci"][0] if env["normalised_ci"] else None,
            "normalised_high": env["normalised_ci"][1] if env["normalised_ci"] else None,
            "published": dumps(env["published"] or None),
            "baseline_mean": env["baseline_mean"],
            "random_mean": env["random_mean"],
            "curve_steps": dumps(env["curve_steps"]),
            "curve": dumps(env["curve"]),
            "curve_std": dumps(env["curve_std"] or None),
            "positive_value_loss": env.get("positive_value_loss"),
            "compile_s": env["compile_s"],
            "run_s": env["run_s"],
            "steps_per_s": env["steps_per_s"],
            "created_at": at,
        }
        for env in data["env_scores"]
    ]


def check_encoding(archive: Archive, rng: random.Random, curves: Curves) -> None:
    """The bulk rows must be the rows the archive's own encoders write for the same outcome."""
    for status, stage in FATES_CHECKED:
        duplicate_of = "r1-1" if status == "duplicate" else None
        data = outcome_data(rng, curves, status, stage, 1.1, duplicate_of=duplicate_of)
        outcome = Outcome.from_dict(json.loads(json.dumps(data)))
        expected = encode_row("candidates", outcome_columns(outcome))
        rows = [encode_row("evaluations", r) for r in evaluation_rows(outcome, "c", "r", "p")]
        for row in rows:
            row["created_at"] = "now"
        if expected != candidate_columns(data) or rows != evaluations_of(
            data, "c", "r", "p", "now"
        ):
            raise SystemExit(f"the benchmark's {status}/{stage} rows differ from the archive's")


FATES_CHECKED = (
    ("passed", "full"),
    ("failed", "full"),
    ("duplicate", "dedup"),
    ("no_code", "propose"),
)


class Writer:
    """Buffers encoded rows per table and inserts them in bulk (inside the caller's
    transaction)."""

    def __init__(self, db):
        self.db = db
        self.rows: dict[str, list[dict]] = {
            t: [] for t in ("candidates", "evaluations", "parents", "calls")
        }

    def add(self, table: str, row: dict) -> None:
        self.rows[table].append(row)
        if len(self.rows[table]) >= 2000:
            self.flush(table)

    def flush(self, table: str | None = None) -> None:
        for name in [table] if table else list(self.rows):
            if self.rows[name]:
                self.db[name].insert_all(self.rows[name], batch_size=500)
                self.rows[name] = []


def base_row(columns: list[str], run_id: str, method: str) -> dict:
    """A candidate row with every column (None where unset: a bulk insert takes one set of
    keys) and what all of a run's candidates share."""
    return {
        **dict.fromkeys(columns),
        "run_id": run_id,
        "task": "drift",
        "suite": "minatar",
        "method": method,
        "seeds": dumps(SEEDS),
        "total_timesteps": FULL_STEPS,
        "eval_key": EVAL_KEY,
        "config_hash": "5a1f0c3e9b7d2e41",
        "versions": dumps(VERSIONS),
        "device": DEVICE,
    }


def confirm(rng: random.Random, curves: Curves, row: dict, fitness: float) -> list[dict]:
    """Confirm an elite on 16 seeds: its confirmed columns, and the evaluation rows."""
    data = outcome_data(rng, curves, "passed", "full", fitness - 0.03, seeds=CONFIRM_SEEDS)
    (fit_low, fit_high), (held_low, held_high) = data["fitness_ci"], data["heldout_ci"]
    row.update(
        confirmed_fitness=data["fitness"],
        confirmed_heldout=data["heldout"],
        confirmed_seeds=dumps(CONFIRM_SEEDS),
        confirmed_fitness_low=(fit_low + data["fitness"]) / 2,
        confirmed_fitness_high=(fit_high + data["fitness"]) / 2,
        confirmed_heldout_low=(held_low + data["heldout"]) / 2,
        confirmed_heldout_high=(held_high + data["heldout"]) / 2,
    )
    data["env_scores"] = [e for e in data["env_scores"] if e["stage"] == "full"]
    return evaluations_of(data, row["id"], row["run_id"], "confirm", row["created_at"])


def build_discovery(archive: Archive, candidates: int, rng: random.Random, curves: Curves) -> str:
    """One finished LLM discovery run of `candidates` proposals after the seed programs."""
    hours = 12.0
    run_id = archive.create_run(
        task="drift",
        suite="minatar",
        method="discovery",
        proposer="llm",
        model=MODELS[0],
        mode="population",
        seed=0,
        budget_candidates=candidates,
        max_cost_usd=50.0,
        started_at=START.isoformat(),
        device=DEVICE,
        host="gpu-node-3",
        config={"proposer": "llm", "models": list(MODELS), "budget": candidates},
        versions=VERSIONS,
    )
    columns = list(archive.db["candidates"].columns_dict)
    passed: list[tuple[str, float]] = []  # (id, fitness) of every passed candidate so far
    params: dict[str, list[float]] = {}
    codes: dict[str, str] = {}
    best: tuple[str, float] | None = None
    cost, seq = 0.0, 0
    system = "You discover reinforcement learning algorithms. " * 60
    with archive.transaction() as db:
        writer = Writer(db)
        for program in get_task("drift").seed_programs():
            seq += 1
            cid = f"{run_id}-{seq}"
            data = outcome_data(rng, curves, "passed", "full", 1.0 if program.is_baseline else 0.9)
            row = base_row(columns, run_id, "discovery")
            row.update(
                id=cid,
                seq=seq,
                hash=source_hash(program.source),
                code=program.source,
                name=program.name,
                thought=f"seed program {program.path.name}",
                parent_ids="[]",
                generation=0,
                slot=seq,
                is_seed=1,
                proposer="seed",
                operator="seed",
                created_at=START.isoformat(),
                **candidate_columns(data),
            )
            for evaluation in evaluations_of(data, cid, run_id, "selection", row["created_at"]):
                writer.add("evaluations", evaluation)
            writer.add("candidates", row)
            passed.append((cid, data["fitness"]))
            params[cid] = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
            codes[cid] = program.source
        seeds_count = seq
        for index in range(candidates):
            seq += 1
            cid = f"{run_id}-{seq}"
            at = (START + timedelta(hours=hours * (index + 1) / candidates)).isoformat()
            draw = rng.random()
            status, stage = next((s, st) for share, s, st in FATES if draw < share)
            # a tournament of two over the passed candidates so far
            first, second = rng.choice(passed), rng.choice(passed)
            parent = first if first[1] >= second[1] else second
            parent_ids = [parent[0]]
            operator = rng.choice(OPERATORS)
            if operator == "crossover":
                parent_ids.append(rng.choice(passed)[0])
            child = list(params[parent[0]])
            child[rng.randrange(8)] += rng.gauss(0.0, 0.3)
            thought = rng.choice(THOUGHTS)
            name = f"drift-{seq}"
            code = child_code(child, name, thought)
            duplicate_of = None
            if status == "duplicate":
                duplicate_of = rng.choice(passed)[0]
                code = codes[duplicate_of]
            elif status == "no_code":
                code = None
            fitness = parent[1] + rng.gauss(-0.04, 0.09)
            data = outcome_data(rng, curves, status, stage, fitness, duplicate_of=duplicate_of)
            model = MODELS[index % 2]
            prompt_tokens = rng.randint(2500, 7000)
            failed_call = status == "no_code" and rng.random() < 0.3
            completion_tokens = 0 if failed_call else rng.randint(250, 1200)
            price = (0.4e-6, 1.6e-6) if model == MODELS[0] else (3e-6, 15e-6)
            call_cost = prompt_tokens * price[0] + completion_tokens * price[1]
            cost += call_cost
            latency = rng.lognormvariate(2.0, 0.5)
            call_id = index + 1
            prompt = [
                {"role": "system", "content": system},
                {"role": "user", "content": "Parents:\n" + codes[parent[0]] + "\nImprove it."},
            ]
            writer.add(
                "calls",
                {
                    "id": call_id,
                    "run_id": run_id,
                    "candidate_id": cid,
                    "model": model,
                    "prompt": dumps(prompt),
                    "reply": None if failed_call else f"{thought}\n```python\n{code}```",
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "cost_usd": call_cost,
                    "latency_s": latency,
                    "error": "timeout after 120 s" if failed_call else None,
                    "created_at": at,
                },
            )
            row = base_row(columns, run_id, "discovery")
            row.update(
                id=cid,
                seq=seq,
                hash=hashlib.sha256(code.encode()).hexdigest()[:16] if code else None,
                code=code,
                name=name if code else None,
                thought=thought,
                parent_ids=dumps(parent_ids),
                generation=1 + index // 64,
                island=index % 4,
                slot=index % 64,
                is_seed=0,
                proposer="llm",
                operator=operator,
                prompt_id=call_id,
                reply_id=call_id,
                call_ids=dumps([call_id]),
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                cost_usd=call_cost,
                latency_s=latency,
                created_at=at,
                **candidate_columns(data),
            )
            for position, parent_id in enumerate(parent_ids):
                edge = {"child_id": cid, "parent_id": parent_id, "position": position}
                writer.add("parents", {**edge, "run_id": run_id})
            for evaluation in evaluations_of(data, cid, run_id, "selection", at):
                writer.add("evaluations", evaluation)
            if status == "passed":
                # elites are confirmed: most candidates that beat the incumbent, a few others
                beats = best is None or data["fitness"] > best[1]
                if (beats and rng.random() < 0.8) or rng.random() < 0.01:
                    for evaluation in confirm(rng, curves, row, data["fitness"]):
                        writer.add("evaluations", evaluation)
                passed.append((cid, data["fitness"]))
                params[cid] = child
                codes[cid] = code
                if beats:
                    best = (cid, data["fitness"])
            writer.add("candidates", row)
        writer.flush()
    ended = START + timedelta(hours=hours, minutes=3)
    archive.update_run(
        run_id,
        status="finished",
        stop_reason=f"budget of {candidates} candidates reached",
        ended_at=ended.isoformat(),
        updated_at=ended.isoformat(),
        elapsed_s=(ended - START).total_seconds(),
        cost_usd=cost,
        candidates_count=seq - seeds_count,
        generation=1 + candidates // 64,
        best_id=best[0] if best else None,
        best_fitness=best[1] if best else None,
        state={"generation": 1 + candidates // 64, "islands": 4},
    )
    return run_id


def build_es(archive: Archive, exports: int, rng: random.Random, curves: Curves) -> str:
    """One finished ES run: `exports` exported means, one every 5 generations."""
    every = 5
    started = START + timedelta(hours=13)
    run_id = archive.create_run(
        task="drift",
        suite="minatar",
        method="es",
        proposer="evosax Open_ES",
        seed=0,
        started_at=started.isoformat(),
        device=DEVICE,
        host="gpu-node-3",
        config={"generations": exports * every, "population": 64, "export_every": every},
        versions=VERSIONS,
    )
    columns = list(archive.db["candidates"].columns_dict)
    history, best, sigma, member = [], None, 0.05, 0.3
    for generation in range(1, exports * every + 1):
        member += rng.gauss(0.012, 0.01)
        sigma *= 0.995
        history.append(
            {
                "generation": generation,
                "best": member + abs(rng.gauss(0.15, 0.05)),
                "mean": member,
                "std": abs(rng.gauss(0.08, 0.02)),
                "sigma": sigma,
                "seconds": rng.uniform(40, 60),
            }
        )
    weights = [rng.gauss(0, 0.5) for _ in range(96)]
    with archive.transaction() as db:
        writer = Writer(db)
        previous = None
        for seq in range(1, exports + 1):
            cid = f"{run_id}-{seq}"
            generation = seq * every
            weights = [w + rng.gauss(0, 0.02) for w in weights]
            code = es_code(generation, weights)
            fitness = 0.5 + 0.6 * seq / exports + rng.gauss(0, 0.05)
            status, stage = ("passed", "full") if rng.random() < 0.9 else ("failed", "short")
            data = outcome_data(rng, curves, status, stage, fitness)
            at = (started + timedelta(minutes=4 * generation)).isoformat()
            row = base_row(columns, run_id, "es")
            row.update(
                id=cid,
                seq=seq,
                hash=hashlib.sha256(code.encode()).hexdigest()[:16],
                code=code,
                name=f"es-g{generation}",
                thought=f"LPONetwork: ES mean after generation {generation} of {run_id}",
                parent_ids=dumps([previous] if previous else []),
                generation=generation,
                is_seed=0,
                proposer="evosax Open_ES",
                operator="es-mean",
                meta=dumps(
                    {"es_generation": generation, "sigma": history[generation - 1]["sigma"]}
                ),
                created_at=at,
                **candidate_columns(data),
            )
            if previous:
                edge = {"child_id": cid, "parent_id": previous, "position": 0}
                writer.add("parents", {**edge, "run_id": run_id})
            for evaluation in evaluations_of(data, cid, run_id, "selection", at):
                writer.add("evaluations", evaluation)
            if data["passed"] and (best is None or data["fitness"] > best[1]):
                best = (cid, data["fitness"])
            writer.add("candidates", row)
            previous = cid
        writer.flush()
    ended = started + timedelta(minutes=4 * exports * every + 5)
    archive.update_run(
        run_id,
        status="finished",
        stop_reason=f"{exports * every} generations done",
        ended_at=ended.isoformat(),
        updated_at=ended.isoformat(),
        elapsed_s=(ended - started).total_seconds(),
        candidates_count=exports,
        generation=exports * every,
        best_id=best[0] if best else None,
        best_fitness=best[1] if best else None,
        state={"generation": exports * every, "exports": exports, "history": history},
    )
    return run_id


def timed(archive: Archive, runs: list[str], out: Path, repeats: int) -> tuple[float, int]:
    """Median seconds of `write_report` over `repeats` calls, and the page's bytes."""
    seconds, size = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        report = write_report(archive, runs, out)
        seconds.append(time.perf_counter() - start)
        size = report.bytes
    return statistics.median(seconds), size


def mb(size: int) -> str:
    return f"{size / 1e6:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=10_000, help="discovery proposals")
    parser.add_argument("--repeats", type=int, default=3, help="timings per report (median)")
    parser.add_argument("--rng-seed", type=int, default=0, help="RNG seed of the fake data")
    parser.add_argument("--profile", action="store_true", help="cProfile one single-run report")
    parser.add_argument("--keep", action="store_true", help="keep the archive and pages")
    args = parser.parse_args()
    rng = random.Random(args.rng_seed)
    curves = Curves(rng)
    folder = Path(tempfile.mkdtemp(prefix="metarl-report-bench-"))
    path = folder / "archive.db"
    with Archive(path) as archive:
        check_encoding(archive, random.Random(args.rng_seed), curves)
        start = time.perf_counter()
        discovery = build_discovery(archive, args.candidates, rng, curves)
        es = build_es(archive, max(10, args.candidates // 50), rng, curves)
        archive.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        build_s = time.perf_counter() - start
        archive_bytes = sum(
            p.stat().st_size for p in folder.iterdir() if p.name.startswith("archive.db")
        )
        counts = {
            table: archive.query(f"SELECT count(*) AS n FROM {table}")[0]["n"]
            for table in ("candidates", "evaluations", "calls")
        }
        plotly_bytes = len(plotly.offline.get_plotlyjs().encode())
        cases = [
            (f"one run ({discovery}, discovery)", [discovery]),
            (f"two runs compared ({discovery} + {es}, es)", [discovery, es]),
        ]
        rows = []
        for label, runs in cases:
            seconds, size = timed(archive, runs, folder / f"report-{len(runs)}.html", args.repeats)
            rows.append((label, seconds, size))
        settings = ReportSettings()
        start = time.perf_counter()
        story = run_story(archive, discovery, settings)
        story_s = time.perf_counter() - start
        start = time.perf_counter()
        render([story], None, settings, str(path), [])
        render_s = time.perf_counter() - start
        if args.profile:
            profile = cProfile.Profile()
            profile.runcall(write_report, archive, [discovery], folder / "profiled.html")
            pstats.Stats(profile).sort_stats("cumulative").print_stats(25)

    print(
        f"# {device_description()} ({os.cpu_count()} cores); metarl {library_versions()['metarl']}"
    )
    print(
        f"# archive: {args.candidates:,} discovery proposals, {counts['candidates']:,} "
        f"candidates in all, {counts['evaluations']:,} evaluations, {counts['calls']:,} LLM "
        f"calls; {mb(archive_bytes)} MB on disk, built in {build_s:.1f} s"
    )
    print(f"# plotly.js embedded in every page: {mb(plotly_bytes)} MB")
    print()
    print(f"| report | median s (of {args.repeats}) | page MB | page MB without plotly.js |")
    print("|---|---:|---:|---:|")
    for label, seconds, size in rows:
        print(f"| {label} | {seconds:.2f} | {mb(size)} | {mb(size - plotly_bytes)} |")
    print()
    print("| one run, split (single pass) | s |")
    print("|---|---:|")
    print(f"| story: read from the archive (`run_story`) | {story_s:.2f} |")
    print(f"| page: figures + template (`render`) | {render_s:.2f} |")
    print()
    (_, single, single_size), (_, compared, compared_size) = rows
    print(
        f"Summary: with {args.candidates:,} candidates a single-run report takes {single:.1f} s "
        f"({mb(single_size)} MB, {mb(single_size - plotly_bytes)} MB of it data and markup), "
        f"the two-run comparison {compared:.1f} s ({mb(compared_size)} MB)."
    )
    if args.keep:
        print(f"# kept: {folder}")
    else:
        for item in folder.iterdir():
            item.unlink()
        folder.rmdir()


if __name__ == "__main__":
    main()
