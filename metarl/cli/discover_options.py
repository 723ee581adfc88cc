"""`metarl discover`'s options, as Typer reads them (`Annotated`, so the command's signature
is a line per option), its help with DiscoverConfig's defaults, and how the parsed options split
into what a resume may change and what defines the search."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, List, Optional

import typer
from typer.core import TyperCommand

from metarl.cli.errors import UserError
from metarl.cli.formats import fmt_duration
from metarl.cli.options import parse_duration, parse_seed_values, task_list


class DiscoverCommand(TyperCommand):
    """`metarl discover`, whose help shows each option's default from DiscoverConfig, the one
    copy of a run's defaults.

    The options themselves default to None (so that a `--config` file can fill them), and the
    config is read only when the help is shown: `metarl.discovery.config` imports the sandbox's
    modules, the suites and numpy (no jax), a few tenths of a second that `metarl --help` and
    every other command would otherwise pay at start-up.
    """

    def format_help(self, ctx, formatter) -> None:
        # lazy: the config imports the sandbox's modules and numpy; only this help needs them
        from metarl.discovery.config import DiscoverConfig

        defaults = DiscoverConfig()
        shown = {}
        for param in self.params:
            value = getattr(defaults, param.name or "", None)
            if param.default is None and value is not None and value != []:
                shown[param] = fmt_duration(value) if param.name == "max_time" else value
        for param, value in shown.items():  # for the help only; parsing never sees these
            param.default = value
        try:
            super().format_help(ctx, formatter)
        finally:
            for param in shown:
                param.default = None


# `metarl discover`'s options, as Typer reads them
TaskOption = Annotated[
    Optional[str], typer.Option("--task", help=f"What to discover: {task_list()}.")
]
SuiteOption = Annotated[
    Optional[str],
    typer.Option(
        "--suite",
        help="Environment suite (smoke, classic, minatar, ...; a task family with --meta).",
    ),
]
MetaOption = Annotated[
    Optional[str],
    typer.Option(
        "--meta",
        help="Score on a task family by adaptation: rl2 (the candidate is RL²'s outer PPO) or "
        "maml (the candidate optimizer is MAML's inner rule).",
    ),
]
ProposerOption = Annotated[
    Optional[str], typer.Option("--proposer", help="mutation (offline) or llm.")
]
BudgetOption = Annotated[
    Optional[int], typer.Option("--budget", help="Candidates to propose (seeds not counted).")
]
WorkersOption = Annotated[
    Optional[int],
    typer.Option("--workers", help="Concurrent evaluations (one per GPU, or Ray tasks per batch)."),
]
ExecutorOption = Annotated[
    Optional[str],
    typer.Option("--executor", help="Where sandboxed workers run: local (this machine) or ray."),
]
RayAddressOption = Annotated[
    Optional[str],
    typer.Option("--ray-address", help="The Ray cluster: auto or HOST:PORT (with --executor ray)."),
]
DevicesOption = Annotated[
    Optional[str],
    typer.Option(
        "--devices",
        help="GPUs to pin local workers to, one each: 0,1,2,3 (CUDA_VISIBLE_DEVICES values).",
    ),
]
RngSeedOption = Annotated[Optional[int], typer.Option("--rng-seed", help="RNG seed of the search.")]
ConfigFileOption = Annotated[
    Optional[Path], typer.Option("--config", help="TOML file with defaults for these options.")
]
ResumeOption = Annotated[
    Optional[str], typer.Option("--resume", help="Continue run RUN exactly where it stopped.")
]
MaxTimeOption = Annotated[
    Optional[str],
    typer.Option(
        "--max-time", help="Wall-time cap (none by default; after generation 1): 10m, 1h."
    ),
]
MaxCostOption = Annotated[
    Optional[float], typer.Option("--max-cost", help="LLM cost budget in USD.")
]
SeedsOption = Annotated[
    Optional[int], typer.Option("--seeds", help="Training seeds per evaluation.")
]
TimestepsOption = Annotated[
    Optional[int],
    typer.Option(
        "--timesteps",
        help="Per-environment training budget; default: the protocol's on its suite (quick: "
        "1e5 on classic), else the suite's own, as `metarl evaluate` trains it; 0 = the suite's.",
    ),
]
ChildrenOption = Annotated[
    Optional[int], typer.Option("--children", help="Children per generation.")
]
IslandsOption = Annotated[Optional[int], typer.Option("--islands", help="Number of islands.")]
PopulationOption = Annotated[
    Optional[int], typer.Option("--population", help="Members kept per island.")
]
GuidanceEveryOption = Annotated[
    Optional[int],
    typer.Option(
        "--guidance-every",
        help="Rewrite the prompt's what-worked/what-failed notes from the archive every N "
        "generations (the LLM with --proposer llm, else a rule); 0: never.",
    ),
]
ConfirmOption = Annotated[
    Optional[bool],
    typer.Option(
        "--confirm/--no-confirm",
        help="Race a new best against the incumbent on the validation envs (fresh seeds) "
        "before it takes its place; --no-confirm: the best training score wins.",
    ),
]
ConfirmSeedsOption = Annotated[
    Optional[int],
    typer.Option(
        "--confirm-seeds", help="Fresh seeds per validation round (default: 2 x --seeds)."
    ),
]
RaceSeedsOption = Annotated[
    Optional[int],
    typer.Option("--race-seeds", help="The most validation seeds a contender gets in a race."),
]
LrSweepOption = Annotated[
    Optional[str],
    typer.Option(
        "--lr-sweep",
        help="Sweep the learning rate: 5 (a log grid around each env's tuned rate) or "
        "1e-4,3e-4,1e-3; one compiled program, the baseline swept alike.",
    ),
]
LrAggregationOption = Annotated[
    Optional[str],
    typer.Option("--lr-aggregation", help="A swept env's score: best (DiscoBench) or mean."),
]
CurriculumOption = Annotated[
    Optional[str],
    typer.Option(
        "--curriculum",
        help="Draw each generation's training envs from the suite's distribution (grid-small, "
        "grid-random, cartpole-params): uniform, plr (positive value loss) or groove "
        "(regret against the baseline).",
    ),
]
CurriculumLevelsOption = Annotated[
    Optional[int],
    typer.Option("--curriculum-levels", help="Training envs drawn per generation (default: 4)."),
]
ProtocolOption = Annotated[
    Optional[str],
    typer.Option(
        "--protocol",
        help="Evaluation protocol: quick (CPU demo) or discobench (MinAtar, 8 seeds, "
        "LR sweep; a GPU). Explicit options override it.",
    ),
]
HeldoutOption = Annotated[
    Optional[bool],
    typer.Option("--heldout/--no-heldout", help="Score held-out environments (leaderboard only)."),
]
SkipShortOption = Annotated[
    Optional[bool],
    typer.Option("--skip-short/--no-skip-short", help="Skip the cascade's short run."),
]
FidelityOption = Annotated[
    Optional[str],
    typer.Option(
        "--fidelity",
        help="full: every child trains its whole budget; rungs: a child clearly below half "
        "the baseline's progress at 1/3 of a training env's run stops there. Default: the "
        "protocol's (minatar-cpu: rungs), else full.",
    ),
]
TrainersOption = Annotated[
    Optional[int],
    typer.Option(
        "--trainers",
        help="On this machine's CPUs: train each batch in this many shares at once, one "
        "trainer process each (XLA trains one per core); scores do not change. Default 1.",
    ),
]
StabilityOption = Annotated[
    Optional[float],
    typer.Option(
        "--stability",
        help="Train a race's winner, paired with the incumbent, at this many times the budget "
        "on the validation envs and refuse it when significantly worse there (a drift that "
        "learns fast, then collapses); 0: off. Default: the protocol's (quick: 5), else off.",
    ),
]
TimeoutOption = Annotated[
    Optional[float], typer.Option("--timeout", help="Per-evaluation time limit in seconds.")
]
UnsafeNoSandboxOption = Annotated[
    Optional[bool],
    typer.Option(
        "--unsafe-no-sandbox",
        help="Run candidate code WITHOUT bubblewrap (it can then read this machine's files "
        "and keys). Only where bwrap cannot run.",
    ),
]
ModelOption = Annotated[
    Optional[List[str]],
    typer.Option("--model", help="LLM PROVIDER/MODEL[:weight], repeatable (--proposer llm)."),
]
ApiBaseOption = Annotated[
    Optional[str], typer.Option("--api-base", help="OpenAI-compatible server URL (--proposer llm).")
]
ModeOption = Annotated[
    Optional[str], typer.Option("--mode", help="population or conversation (--proposer llm).")
]
ModelChoiceOption = Annotated[
    Optional[str],
    typer.Option(
        "--model-choice",
        help="How each LLM call's model is picked among several --model: bandit (Thompson "
        "sampling on improvement per dollar, per second for unpriced models) or weights "
        "(the fixed :weight shares).",
    ),
]
LlmTimeoutOption = Annotated[
    Optional[float], typer.Option("--llm-timeout", help="Seconds per LLM call.")
]
MaxConcurrencyOption = Annotated[
    Optional[int], typer.Option("--max-concurrency", help="Concurrent LLM calls.")
]
TemperatureOption = Annotated[
    Optional[float], typer.Option("--temperature", help="LLM sampling temperature.")
]
LiveOption = Annotated[
    Optional[bool],
    typer.Option("--live/--no-live", help="Live display (default: on a terminal, unless -v)."),
]
QuietOption = Annotated[
    bool, typer.Option("--quiet", "-q", help="Only print the final leaderboard.")
]
ReportOption = Annotated[
    bool,
    typer.Option("--report", help="Write the run's HTML report (report-RUN.html) when it ends."),
]


# discover's options a resume may change (budgets, and where it runs), as DiscoverConfig names them
RESUMABLE = (
    "budget", "workers", "trainers", "executor", "ray_address", "devices", "max_cost", "api_base",
    "llm_timeout", "max_concurrency", "timeout", "unsafe_no_sandbox",
)  # fmt: skip
# those that define the search (a resume keeps the run's own)
SEARCH = (
    "task", "suite", "proposer", "rng_seed", "seeds", "seed_values", "timesteps", "children",
    "islands", "population", "guidance_every", "mode", "model_choice", "models", "confirm",
    "confirm_seeds", "race_seeds", "lr_sweep", "lr_aggregation", "curriculum",
    "curriculum_levels", "protocol", "heldout", "skip_short", "fidelity", "stability",
)  # fmt: skip


def split_options(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """discover's parsed options as (those a resume may change, those that define the search).

    Args:
        params: the command's parameters by name (Typer's `ctx.params`); None = not given.

    Returns:
        Two dicts keyed by DiscoverConfig's field names; `max_time` is in the first only when
        given ("none" is None there: no limit).

    Raises:
        UserError: a malformed --max-time, --devices or --seed-values.
    """
    values = dict(params)
    max_time = parse_duration(params["max_time"])
    values["devices"] = devices_of(params["devices"])
    values["unsafe_no_sandbox"] = params["unsafe_no_sandbox"] or None
    values["seed_values"] = parse_seed_values(params["seed_values"])
    values["models"] = params["model"] or None
    if params["meta"] is not None:
        # lazy: the suites module is light, but keep the CLI's import time as it is
        from metarl.rl.suites import meta_suite_name

        values["suite"] = meta_suite_name(params["suite"] or "", params["meta"])
    overrides = {name: values[name] for name in RESUMABLE}
    if params["max_time"] is not None:
        overrides["max_time"] = max_time
    return overrides, {name: values[name] for name in SEARCH}


def devices_of(text: str | None) -> list[str] | None:
    """ "0,1,2" -> ["0", "1", "2"]; None when not given."""
    if text is None:
        return None
    devices = [d.strip() for d in text.split(",") if d.strip()]
    if not devices:
        raise UserError("--devices needs at least one device, e.g. --devices 0,1")
    return devices
