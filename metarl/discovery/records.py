"""What the discovery loop hands the evaluator and the archive: the cascade settings of each
purpose (children, seed programs, validation rounds, test measurements), the key under which
evaluations may be shared, the candidate rows, the LLM-call records and the events the live
display reads."""

from __future__ import annotations

from dataclasses import dataclass

from metarl.archives.keys import eval_settings_key, suite_config_hash
from metarl.discovery.config import DiscoverConfig
from metarl.discovery.proposers.base import LLMCall, Proposal
from metarl.discovery.state import Slot
from metarl.evaluation.executors import ExecutorSettings, pinned_devices
from metarl.evaluation.seeds import pinned_extension
from metarl.evaluation.settings import CascadeSettings
from metarl.rl.suites import get_suite
from metarl.tasks.candidate import source_hash


def cascade_settings(
    config: DiscoverConfig,
    purpose: str,
    seed_pool: list[int] | None = None,
    final_rate: tuple[str | None, float] = (None, 1.0),
    train_envs: list[str] | None = None,
) -> CascadeSettings:
    """The evaluator's settings for `purpose`, one per role of the suite's environments:

    - "child": the training envs on the selection seeds, the short run as configured;
    - "seed": seed programs, training and test envs (the test scores are only reported);
    - "confirm": a validation round: the validation envs only (the training envs on fresh
      seeds when the suite names none), `confirm_seeds` fresh seeds, no short run;
    - "stability": a race winner's check past the budget (races.py): a validation round at
      `stability` times the budget;
    - "final": the incumbent's test envs on fresh seeds, measured after selection, at the
      one learning rate its validation rounds chose: `final_rate` = (a one-rate `lr_sweep`
      for explicit rates, or None; `lr_scale`, the multiplier of each env's tuned rate).

    `train_envs`: a curriculum's draw, the training envs of a "child" batch
    (rl/environments/curriculum.py).

    Training seeds: the config's pinned values (a confirmation's extended past them), or
    drawn per batch from the run's secret `seed_pool` (evaluation/seeds.py)."""
    rounds = ("confirm", "stability")
    seeds = config.confirm_seeds if purpose in (*rounds, "final") else config.seeds
    if purpose == "stability":  # two runs at least: a paired comparison needs an interval
        seeds = max(2, seeds)
    validation = purpose in rounds and bool(get_suite(config.suite).validation)
    timesteps, timeout = config.timesteps, config.timeout
    if purpose == "stability":  # factor x the budget: factor x the time
        timesteps = int(round(float(config.stability) * int(config.timesteps)))
        timeout = float(config.stability) * float(config.timeout)
    pinned = config.seed_values
    if pinned and len(pinned) != seeds:
        pinned = pinned_extension(pinned, seeds, ())
    return CascadeSettings(
        suite=config.suite,
        seeds=seeds,
        seed_values=list(pinned) if pinned else None,
        seed_pool=None if pinned else seed_pool,
        short_run_threshold=config.short_threshold,
        total_timesteps=timesteps,
        short_timesteps=config.short_timesteps,
        timeout_s=timeout,
        memory_mb=config.memory_mb,
        heldout=purpose in ("seed", "final") and config.heldout,
        validation=validation,
        train=purpose in ("child", "seed") or (purpose in rounds and not validation),
        skip_short=config.skip_short if purpose == "child" else True,
        # rungs for the children only: seeds, races and final measurements train their budget
        rungs=list(config.rungs) if purpose == "child" and config.fidelity == "rungs" else None,
        behaviour_novelty=config.behaviour_novelty,
        unsafe_no_sandbox=config.unsafe_no_sandbox,
        # probe inputs: fresh (unpredictable) for drawn seeds; fixed with pinned seeds, so a
        # pinned run is reproducible to the last verdict
        probe_seed=0 if pinned else None,
        train_envs=list(train_envs) if train_envs and purpose == "child" else None,
        lr_sweep=final_rate[0] if purpose == "final" else config.lr_sweep,
        lr_aggregation=config.lr_aggregation,
        lr_scale=final_rate[1] if purpose == "final" else 1.0,
    )


def executor_settings(config: DiscoverConfig) -> ExecutorSettings:
    """Where the run's sandboxed workers run: the config's executor, with local workers pinned
    one per GPU when there are several GPUs and several workers (`pinned_devices`)."""
    devices = pinned_devices(config.devices, config.workers) if config.executor == "local" else ()
    trainers = config.trainers if config.executor == "local" and not devices else 1
    return ExecutorSettings(config.executor, devices, config.ray_address, trainers=trainers)


@dataclass(frozen=True)
class RowMaker:
    """The columns every candidate row of one run shares, and the rows of seeds and children.

    `versions` is the run's `platform.evaluation_identity()`, `device` its
    `platform.device_description()` (for people; not part of the key)."""

    run_id: str
    task: str
    config: DiscoverConfig
    versions: dict
    device: str

    def key(self, settings: CascadeSettings) -> str:
        """The evaluation key of this run's rows scored with `settings`: the one every method
        builds (archives/keys.py), so another method's evaluation of a program is found.

        Args:
            settings: the cascade settings of the purpose (child, seed, confirm).

        Returns:
            The key (`archives.keys.eval_settings_key`).
        """
        return eval_settings_key(self.task, settings, self.versions)

    def base(self, settings: CascadeSettings) -> dict:
        return {
            "run_id": self.run_id,
            "task": self.task,
            "method": "discovery",
            "suite": self.config.suite,
            "seeds": list(settings.seed_values or []),  # pinned; else set once trained
            "total_timesteps": self.config.timesteps,
            "eval_key": self.key(settings),
            "config_hash": suite_config_hash(self.config.suite, self.config.timesteps),
            "versions": self.versions,
            "device": self.device,
        }

    def seed(self, settings: CascadeSettings, cid: str, seq: int, program) -> dict:
        """The row of seed program `program` (a task's SeedProgram)."""
        return {
            **self.base(settings),
            "id": cid,
            "seq": seq,
            "hash": source_hash(program.source),
            "code": program.source,
            "name": program.name,
            "thought": f"seed program {program.path.name}",
            "parent_ids": [],
            "generation": 0,
            "island": None,
            "slot": seq,
            "is_seed": 1,
            "proposer": "seed",
            "operator": "seed",
        }

    def child(
        self, settings: CascadeSettings, slot: Slot, generation: int, proposer_name: str
    ) -> dict:
        """The row of a planned child; `proposer_name` labels it when its proposal does not."""
        proposal = slot.proposal
        code = proposal.code
        return {
            **self.base(settings),
            "id": slot.id,
            "seq": slot.seq,
            "hash": source_hash(code) if code else None,
            "code": code,
            "name": proposal.name or None,
            "thought": proposal.thought or None,
            "parent_ids": proposal.parent_ids or slot.parent_ids,
            "generation": generation,
            "island": slot.island,
            "slot": slot.slot,
            "is_seed": 0,
            "proposer": proposal.proposer or proposer_name,
            "operator": proposal.operator or None,
            # the guidance version its proposal saw (discovery/guidance.py); none before one
            "meta": {"guidance": slot.guidance} if slot.guidance is not None else None,
        }


def call_records(proposal: Proposal) -> list[dict]:
    """The proposal's LLM calls as the archive's `calls` rows take them."""
    return [_call_record(c) for c in proposal.calls]


def _call_record(call: LLMCall) -> dict:
    return {
        "model": call.model,
        "prompt": call.prompt,
        "reply": call.reply,
        "prompt_tokens": call.prompt_tokens,
        "completion_tokens": call.completion_tokens,
        "cost_usd": call.cost_usd,
        "latency_s": call.latency_s,
        "error": call.error,
    }


def candidate_event(row: dict, progress: dict) -> dict:
    """The live display's `candidate` event for an archived candidate row."""
    return {
        "id": row["id"],
        "name": row["name"],
        "operator": row["operator"],
        "status": row["status"],
        "stage": row["stage"],
        "reason": row["reason"],
        "duplicate_of": row["duplicate_of"],
        "fitness": row["fitness"],
        "eval_s": row["eval_s"],
        "is_seed": bool(row["is_seed"]),
        "generation": row["generation"],
        "island": row["island"],
        "cached": row["cached_from"] is not None,
        "state": progress,
    }
