"""GRPO on the proposer with a real small model: where a step's time goes, and what training did
to the proposer on held-out prompts.

    python benchmarks/grpo.py                         # CPU: SmolLM2-135M, 8 steps (~2 h)
    python benchmarks/grpo.py --model PATH --vllm     # a GPU: a larger model, vllm generation

In one fresh archive:
1. `metarl discover` (the offline mutation proposer) for `--budget` children on the reward's
   suite: the prompt source (parents with their results, as the LLM proposer shows them);
2. `ProposerTraining` (what `metarl train-proposer` runs): measure the base model on held-out
   prompts, a supervised warm start of `--sft-steps`, measure, `--steps` GRPO steps with the
   cascade reward, measure the trained model.

Prints one row per GRPO step (mean reward, pass rate of each stage, zero-spread groups, seconds
split into generation, evaluation and update) and the before/after table (Wilson 95% intervals
on the pass rates, bootstrap 95% on the mean reward). The honest expectation on a CPU is
movement in the cheap stages (a parseable program in the reply format), not beating PPO.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from metarl.archives.store import Archive
from metarl.grpo.progress import StepReport
from metarl.grpo.settings import GRPOSettings
from metarl.grpo.train import ProposerTraining

STAGES = ("parse", "static", "probes", "short", "full")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--suite", default="smoke")
    parser.add_argument("--timesteps", type=int, default=20_000)
    parser.add_argument("--train-seeds", type=int, default=2)
    parser.add_argument("--budget", type=int, default=6, help="discover children (prompt source)")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=768)
    parser.add_argument("--sft-steps", type=int, default=16)
    parser.add_argument("--heldout-prompts", type=int, default=4)
    parser.add_argument("--loss", default="grpo", choices=("grpo", "reinforce"))
    parser.add_argument("--beta", type=float, default=0.0)
    parser.add_argument("--resample", type=int, default=2)
    parser.add_argument("--attempts", type=int, default=1)
    parser.add_argument("--vllm", action="store_true")
    parser.add_argument("--workdir", default=None)
    parser.add_argument(
        "--resume",
        default=None,
        help="continue GRPO run RUN of --workdir's archive (e.g. with fewer --steps: measure now)",
    )
    args = parser.parse_args()

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="metarl-grpo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("METARL_CACHE_DIR", str(workdir / "cache"))
    archive_path = workdir / "metarl.db"
    print(f"machine: {platform.node()} ({os.cpu_count()} cores); workdir {workdir}")

    start = time.perf_counter()
    discover = (
        None
        if args.resume
        else [
            *(sys.executable, "-m", "metarl.cli.app", "discover", "--suite", args.suite),
            *("--timesteps", str(args.timesteps), "--seeds", str(args.train_seeds)),
            *("--budget", str(args.budget), "--max-time", "none", "--no-live"),
            *("--archive", str(archive_path)),
        ]
    )
    if discover is not None:
        subprocess.run(discover, check=True, capture_output=True, text=True)
        took = time.perf_counter() - start
        print(f"prompt source: discover, {args.budget} children, {took:.0f} s")

    settings = GRPOSettings(
        model=args.model,
        suite=args.suite,
        timesteps=args.timesteps,
        train_seeds=args.train_seeds,
        steps=args.steps,
        generations=args.generations,
        max_completion_tokens=args.max_tokens,
        sft_steps=args.sft_steps,
        heldout_prompts=args.heldout_prompts,
        loss=args.loss,
        beta=args.beta,
        resample=args.resample,
        attempts=args.attempts,
        use_vllm=args.vllm,
        output_dir=str(workdir / "proposer"),
    ).resolved()
    reports: list[StepReport] = []
    phases: dict[str, float] = {}
    clock = {"at": time.perf_counter(), "phase": "load"}

    def on_event(kind: str, data) -> None:
        now = time.perf_counter()
        if kind == "status":
            phases[clock["phase"]] = phases.get(clock["phase"], 0.0) + now - clock["at"]
            clock["at"], clock["phase"] = now, data["text"].split(" ")[0]
            print(f"  [{time.strftime('%H:%M:%S')}] {data['text']}", flush=True)
        elif kind == "step":
            reports.append(data)
            print(f"  step {data.step}: reward {data.mean_reward:.3f}, {data.seconds:.0f} s")

    with Archive(archive_path) as archive:
        started = time.perf_counter()
        training = ProposerTraining(settings, archive, resume=args.resume, on_event=on_event)
        result = training.run()
        total = time.perf_counter() - started
    phases[clock["phase"]] = phases.get(clock["phase"], 0.0) + time.perf_counter() - clock["at"]

    print(
        f"\nrun {result.run_id}: {result.status}, {result.step} steps in {total:.0f} s; "
        f"zero-spread groups {result.zero_spread}/{result.groups}"
    )
    with Archive(archive_path) as archive:
        state = archive.get_run(result.run_id)["state"]
    print(f"batches generated again for lack of spread: {state.get('resampled', 0)}")
    # every step of the run, those of earlier sessions (a resumed run) included
    reports = [StepReport(**step) for step in state.get("steps") or []]
    header = "| step | mean reward | " + " | ".join(STAGES) + " | zero-spread | generate s | "
    print(header + "evaluate s | update s | step s | tokens/s |")
    print("|" + "---|" * 13)
    for r in reports:
        rates = " | ".join(
            "—" if r.pass_rates[s] is None else f"{r.pass_rates[s]:.2f}" for s in STAGES
        )
        print(
            f"| {r.step} | {r.mean_reward:.3f} | {rates} | {r.zero_spread}/{r.groups} | "
            f"{r.generate_s:.1f} | {r.evaluate_s:.1f} | {r.update_s:.1f} | {r.seconds:.1f} | "
            f"{r.tokens_per_s:.0f} |"
        )
    if reports:
        n = len(reports)
        mean = lambda key: sum(getattr(r, key) for r in reports) / n  # noqa: E731
        print(
            f"| mean | | | | | | | | {mean('generate_s'):.1f} | {mean('evaluate_s'):.1f} | "
            f"{mean('update_s'):.1f} | {mean('seconds'):.1f} | {mean('tokens_per_s'):.0f} |"
        )
    print("\n| proposer | n | " + " | ".join(STAGES) + " | duplicates | mean reward [95%] | best |")
    print("|---|---|" + "---|" * len(STAGES) + "---|---|---|")
    for score in result.scores:

        def rate(r):
            return "—" if r.value is None else f"{r.value:.2f} [{r.low:.2f}, {r.high:.2f}]"

        reward = score.reward
        interval = "" if reward.low is None else f" [{reward.low:.2f}, {reward.high:.2f}]"
        print(
            f"| {score.label} | {score.completions - score.excluded} | "
            + " | ".join(rate(score.passed[s]) for s in STAGES)
            + f" | {rate(score.duplicates)} | {reward.value:.3f}{interval} | "
            f"{'—' if score.best_fitness is None else f'{score.best_fitness:.3f}'} |"
        )
    print("\nphases (s): " + ", ".join(f"{k} {v:.0f}" for k, v in phases.items()))


if __name__ == "__main__":
    main()
