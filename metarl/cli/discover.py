"""`metarl discover` (the main job) and `metarl resume`: options to a DiscoverConfig, then the
loop, its live display and its report."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, List, Optional

import typer
from typer.core import TyperCommand

from metarl.cli.console import console, say
from metarl.cli.errors import UserError
from metarl.cli.formats import fmt_duration
from metarl.cli.options import (
    RUN_LEADERBOARD_ROWS,
    archive_hint,
    archive_option,
    interrupts_stop_cleanly,
    parse_duration,
    parse_seed_values,
    seed_values_option,
    task_list,
    verbose_option,
)
from metarl.cli.progress import Display, print_interrupted, print_run_report
from metarl.errors import MetarlError
from metarl.evaluation.text import has_redactions, redact_config
from metarl.logs import log_to_stderr

logger = logging.getLogger(__name__)


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


def discover(
    task: Optional[str] = typer.Option(None, "--task", help=f"What to discover: {task_list()}."),
    suite: Optional[str] = typer.Option(
        None,
        "--suite",
        help="Environment suite (smoke, classic, minatar, ...; a task family with --meta).",
    ),
    meta: Optional[str] = typer.Option(
        None,
        "--meta",
        help="Score on a task family by adaptation: rl2 (the candidate is RL²'s outer PPO) or "
        "maml (the candidate optimizer is MAML's inner rule).",
    ),
    proposer: Optional[str] = typer.Option(None, "--proposer", help="mutation (offline) or llm."),
    budget: Optional[int] = typer.Option(
        None, "--budget", help="Candidates to propose (seeds not counted)."
    ),
    archive: str = archive_option(),
    workers: Optional[int] = typer.Option(
        None, "--workers", help="Concurrent evaluations (one per GPU, or Ray tasks per batch)."
    ),
    executor: Optional[str] = typer.Option(
        None, "--executor", help="Where sandboxed workers run: local (this machine) or ray."
    ),
    ray_address: Optional[str] = typer.Option(
        None, "--ray-address", help="The Ray cluster: auto or HOST:PORT (with --executor ray)."
    ),
    devices: Optional[str] = typer.Option(
        None,
        "--devices",
        help="GPUs to pin local workers to, one each: 0,1,2,3 (CUDA_VISIBLE_DEVICES values).",
    ),
    rng_seed: Optional[int] = typer.Option(None, "--rng-seed", help="RNG seed of the search."),
    config_file: Optional[Path] = typer.Option(
        None, "--config", help="TOML file with defaults for these options."
    ),
    resume: Optional[str] = typer.Option(
        None, "--resume", help="Continue run RUN exactly where it stopped."
    ),
    max_time: Optional[str] = typer.Option(
        None, "--max-time", help="Wall-time cap (none by default; after generation 1): 10m, 1h."
    ),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", help="LLM cost budget in USD."),
    seeds: Optional[int] = typer.Option(None, "--seeds", help="Training seeds per evaluation."),
    seed_values: Optional[str] = seed_values_option(),
    timesteps: Optional[int] = typer.Option(
        None,
        "--timesteps",
        help="Per-environment training budget; default: the protocol's on its suite (quick: "
        "1e5 on classic), else the suite's own, as `metarl evaluate` trains it; 0 = the suite's.",
    ),
    children: Optional[int] = typer.Option(None, "--children", help="Children per generation."),
    islands: Optional[int] = typer.Option(None, "--islands", help="Number of islands."),
    population: Optional[int] = typer.Option(None, "--population", help="Members kept per island."),
    guidance_every: Optional[int] = typer.Option(
        None,
        "--guidance-every",
        help="Rewrite the prompt's what-worked/what-failed notes from the archive every N "
        "generations (the LLM with --proposer llm, else a rule); 0: never.",
    ),
    confirm: Optional[bool] = typer.Option(
        None,
        "--confirm/--no-confirm",
        help="Race a new best against the incumbent on the validation envs (fresh seeds) "
        "before it takes its place; --no-confirm: the best training score wins.",
    ),
    confirm_seeds: Optional[int] = typer.Option(
        None, "--confirm-seeds", help="Fresh seeds per validation round (default: 2 x --seeds)."
    ),
    race_seeds: Optional[int] = typer.Option(
        None, "--race-seeds", help="The most validation seeds a contender gets in a race."
    ),
    lr_sweep: Optional[str] = typer.Option(
        None,
        "--lr-sweep",
        help="Sweep the learning rate: 5 (a log grid around each env's tuned rate) or "
        "1e-4,3e-4,1e-3; one compiled program, the baseline swept alike.",
    ),
    lr_aggregation: Optional[str] = typer.Option(
        None, "--lr-aggregation", help="A swept env's score: best (DiscoBench) or mean."
    ),
    curriculum: Optional[str] = typer.Option(
        None,
        "--curriculum",
        help="Draw each generation's training envs from the suite's distribution (grid-small, "
        "grid-random, cartpole-params): uniform, plr (positive value loss) or groove "
        "(regret against the baseline).",
    ),
    curriculum_levels: Optional[int] = typer.Option(
        None, "--curriculum-levels", help="Training envs drawn per generation (default: 4)."
    ),
    protocol: Optional[str] = typer.Option(
        None,
        "--protocol",
        help="Evaluation protocol: quick (CPU demo) or discobench (MinAtar, 8 seeds, "
        "LR sweep; a GPU). Explicit options override it.",
    ),
    heldout: Optional[bool] = typer.Option(
        None, "--heldout/--no-heldout", help="Score held-out environments (leaderboard only)."
    ),
    skip_short: Optional[bool] = typer.Option(
        None, "--skip-short/--no-skip-short", help="Skip the cascade's short run."
    ),
    timeout: Optional[float] = typer.Option(
        None, "--timeout", help="Per-evaluation time limit in seconds."
    ),
    unsafe_no_sandbox: Optional[bool] = typer.Option(
        None,
        "--unsafe-no-sandbox",
        help="Run candidate code WITHOUT bubblewrap (it can then read this machine's files "
        "and keys). Only where bwrap cannot run.",
    ),
    model: List[str] = typer.Option(
        [], "--model", help="LLM PROVIDER/MODEL[:weight], repeatable (--proposer llm)."
    ),
    api_base: Optional[str] = typer.Option(
        None, "--api-base", help="OpenAI-compatible server URL (--proposer llm)."
    ),
    mode: Optional[str] = typer.Option(
        None, "--mode", help="population or conversation (--proposer llm)."
    ),
    model_choice: Optional[str] = typer.Option(
        None,
        "--model-choice",
        help="How each LLM call's model is picked among several --model: bandit (Thompson "
        "sampling on improvement per dollar, per second for unpriced models) or weights "
        "(the fixed :weight shares).",
    ),
    llm_timeout: Optional[float] = typer.Option(
        None, "--llm-timeout", help="Seconds per LLM call."
    ),
    max_concurrency: Optional[int] = typer.Option(
        None, "--max-concurrency", help="Concurrent LLM calls."
    ),
    temperature: Optional[float] = typer.Option(
        None, "--temperature", help="LLM sampling temperature."
    ),
    live: Optional[bool] = typer.Option(
        None, "--live/--no-live", help="Live display (default: on a terminal, unless -v)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only print the final leaderboard."),
    report: bool = typer.Option(
        False, "--report", help="Write the run's HTML report (report-RUN.html) when it ends."
    ),
    verbose: bool = verbose_option(),
) -> None:
    """Run the evolutionary search: propose programs, evaluate them, archive everything.

    With no options it runs offline (mutation proposer) on the `drift` task and the `classic`
    suite at a reduced budget: its seed programs, then 12 children, then a leaderboard of the
    children next to the seed programs. Budgets count work: `--max-time` caps wall time only
    when given, and never before the seed programs and one generation are scored.

    Examples:

      metarl discover
      metarl discover --suite smoke --budget 5 --report
      metarl discover --budget 40 --max-time 1h --workers 2 --rng-seed 1
      metarl discover --proposer llm --model openai/gpt-4o-mini --max-cost 2
      metarl discover --protocol discobench --devices 0,1,2,3   # DiscoBench-style, GPUs
      metarl discover --suite grid-small --curriculum groove   # levels drawn by regret
      metarl discover --task optimizer --suite pendulum-tasks --meta maml   # adapts faster
      metarl discover --executor ray --ray-address 10.0.0.5:6379 --workers 8
      metarl discover --config discover.toml
    """
    log_to_stderr(verbose)
    duration = parse_duration(max_time)
    overrides: dict[str, Any] = {
        "budget": budget,
        "workers": workers,
        "executor": executor,
        "ray_address": ray_address,
        "devices": _devices(devices),
        "max_cost": max_cost,
        "api_base": api_base,
        "llm_timeout": llm_timeout,
        "max_concurrency": max_concurrency,
        "timeout": timeout,
        "unsafe_no_sandbox": unsafe_no_sandbox or None,
    }
    if max_time is not None:
        overrides["max_time"] = duration
    if meta is not None:
        # lazy: the suites module is light, but keep the CLI's import time as it is
        from metarl.rl.suites import meta_suite_name

        suite = meta_suite_name(suite or "", meta)
    fixed = {
        "task": task,
        "suite": suite,
        "proposer": proposer,
        "rng_seed": rng_seed,
        "seeds": seeds,
        "seed_values": parse_seed_values(seed_values),
        "timesteps": timesteps,
        "children": children,
        "islands": islands,
        "population": population,
        "guidance_every": guidance_every,
        "mode": mode,
        "model_choice": model_choice,
        "models": list(model) or None,
        "confirm": confirm,
        "confirm_seeds": confirm_seeds,
        "race_seeds": race_seeds,
        "lr_sweep": lr_sweep,
        "lr_aggregation": lr_aggregation,
        "curriculum": curriculum,
        "curriculum_levels": curriculum_levels,
        "protocol": protocol,
        "heldout": heldout,
        "skip_short": skip_short,
    }
    if resume and config_file is not None:
        raise UserError(
            "--config cannot be combined with --resume: a run keeps its settings "
            "(change budgets with --budget, --max-time, --max-cost)"
        )
    if resume:
        config = _resume_config(archive, resume, overrides, fixed)
    else:
        config = _collect(config_file, {**fixed, "temperature": temperature, **overrides})
    if max_time is not None and duration is None:  # "--max-time none" lifts the limit
        config.max_time = None
    run_discovery(config, archive, resume, live, quiet, verbose, report)


def _devices(text: str | None) -> list[str] | None:
    """ "0,1,2" -> ["0", "1", "2"]; None when not given."""
    if text is None:
        return None
    devices = [d.strip() for d in text.split(",") if d.strip()]
    if not devices:
        raise UserError("--devices needs at least one device, e.g. --devices 0,1")
    return devices


def resume(
    run: str = typer.Argument(..., help="The run to continue, e.g. r3."),
    archive: str = archive_option(),
    budget: Optional[int] = typer.Option(
        None, "--budget", help="New candidate budget (total, not extra)."
    ),
    max_time: Optional[str] = typer.Option(
        None, "--max-time", help="New wall-time budget (total over the run)."
    ),
    max_cost: Optional[float] = typer.Option(
        None, "--max-cost", help="New LLM cost budget in USD."
    ),
    workers: Optional[int] = typer.Option(None, "--workers", help="Concurrent evaluations."),
    executor: Optional[str] = typer.Option(
        None, "--executor", help="Where sandboxed workers run: local or ray."
    ),
    ray_address: Optional[str] = typer.Option(
        None, "--ray-address", help="The Ray cluster to reconnect to: auto or HOST:PORT."
    ),
    api_base: Optional[str] = typer.Option(
        None, "--api-base", help="OpenAI-compatible server URL."
    ),
    live: Optional[bool] = typer.Option(
        None, "--live/--no-live", help="Live display (default: on a terminal, unless -v)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only print the final leaderboard."),
    report: bool = typer.Option(
        False, "--report", help="Write the run's HTML report (report-RUN.html) when it ends."
    ),
    verbose: bool = verbose_option(),
) -> None:
    """Continue a stopped, interrupted or killed run exactly (alias of discover --resume).

    Examples:

      metarl resume r3

      metarl resume r3 --budget 40 --max-time 30m

      metarl resume r3 --ray-address 10.0.0.5:6379
    """
    log_to_stderr(verbose)
    overrides = {
        "budget": budget,
        "max_cost": max_cost,
        "workers": workers,
        "executor": executor,
        "ray_address": ray_address,
        "api_base": api_base,
    }
    duration = parse_duration(max_time)
    if max_time is not None:
        overrides["max_time"] = duration
    config = _resume_config(archive, run, overrides, {})
    if max_time is not None and duration is None:
        config.max_time = None
    run_discovery(config, archive, run, live, quiet, verbose, report)


def _collect(config_file: Path | None, cli: dict):
    """The run's DiscoverConfig: the command line over the config file over the defaults.

    Raises:
        ConfigError: a bad config file or option value.
    """
    # lazy: the config imports the sandbox's modules and numpy; `metarl --help` stays fast
    from metarl.discovery.config import DiscoverConfig, load_config_file

    values = DiscoverConfig().to_dict()
    if config_file is not None:
        values.update(load_config_file(config_file))
    for key, value in cli.items():
        if value is not None and value != []:
            values[key] = value
    return DiscoverConfig.from_dict(values).resolved()


def _resume_config(archive_path: str, run_id: str, overrides: dict, fixed: dict):
    """The stored config of run `run_id` with the budgets in `overrides`.

    Raises:
        ConfigError: a setting in `fixed` differs from the run's.
        ArchiveError: no archive, or no such run.
    """
    # lazy: the archive imports sqlite_utils and jax; `metarl --help` stays fast
    from metarl.archives.store import Archive
    from metarl.discovery.config import ConfigError, DiscoverConfig, upgrade_keys

    with Archive(archive_path, must_exist=True) as archive:
        run = archive.get_run(run_id)
    stored = upgrade_keys(run.get("config") or {})  # an older metarl's names (`seed`) too
    stored.setdefault("model_choice", "weights")  # how a run from before the bandit chose
    for key, value in fixed.items():
        if value is not None and value != [] and stored.get(key) != value:
            raise ConfigError(
                f"run {run_id} was started with {key} {stored.get(key)!r}; it cannot change on "
                f"resume (start a new run instead)"
            )
    values = {**stored, **{k: v for k, v in overrides.items() if v is not None}}
    _check_credentials(run_id, values)
    if values.get("executor") == "local":  # back on this machine: the cluster is not needed
        values["ray_address"] = None
    return DiscoverConfig.from_dict(values).resolved()


def _check_credentials(run_id: str, values: dict) -> None:
    """Raises ConfigError when a resumed run's option lost its credentials to the archive's
    redaction (`--api-base http://***@host/v1`) and the command line does not give it again."""
    # lazy: the config imports the sandbox's modules and numpy; `metarl --help` stays fast
    from metarl.discovery.config import ConfigError

    for key, value in values.items():
        if has_redactions(value):
            option = "--" + key.replace("_", "-")
            raise ConfigError(
                f"run {run_id}'s {option} held credentials, which are never archived "
                f"({value}); give {option} again to resume it"
            )


def _build_proposer(config):
    """The run's proposer, from the registry of proposer kinds; a bad option is a usage error
    (LLMConfigError, or a UserError for a ValueError of the proposer's own), a kind that cannot
    be built here (ProposerUnavailable) a failure."""
    # lazy: building a proposer imports jax or litellm; `metarl --help` and the archive commands
    # stay fast
    from metarl.discovery.proposers import make_proposer

    try:
        return make_proposer(config.proposer, config)
    except MetarlError:
        raise
    except ValueError as error:  # a proposer option its builder refuses
        raise UserError(str(error)) from None


def run_discovery(
    config,
    archive_path: str,
    resume: str | None,
    live: bool | None,
    quiet: bool,
    verbose: bool = False,
    report: bool = False,
) -> None:
    """Run (or resume) the loop with a display, then print the run's report.

    Args:
        config: the resolved DiscoverConfig.
        archive_path: the archive; it must exist when resuming.
        resume: the run to continue, or None for a new run.
        live: the live display; None: on a terminal unless `quiet` or `verbose`.
        quiet: print only the final report.
        verbose: INFO records go to stderr (the live display would garble them).
        report: write the run's HTML report at the end; without it, say how to.
    """
    # lazy: the loop imports jax; `metarl --help` and the archive commands stay fast
    from metarl.archives.incumbents import run_summary
    from metarl.archives.queries import leaderboard
    from metarl.archives.store import Archive
    from metarl.discovery.loop import DiscoveryLoop
    from metarl.discovery.novelty import summary_line
    from metarl.evaluation.executors import connect_ray
    from metarl.report.page import default_path, write_report
    from metarl.report.settings import ReportError

    if config.executor == "ray":  # an unreachable cluster is one line before any archive
        connect_ray(config.ray_address)
    archive = Archive(archive_path, must_exist=bool(resume))
    proposer = _build_proposer(config)
    if live is None:
        live = console.is_terminal and not quiet and not verbose
    view = Display(live=live, budget=config.budget, quiet=quiet)
    loop = DiscoveryLoop(archive, config, proposer, resume=resume, on_event=view)
    logger.info(
        "discover: archive %s, resume %s, config %s",
        archive_path,
        resume,
        redact_config(config.to_dict()),
    )
    start = time.monotonic()
    try:
        with interrupts_stop_cleanly(), view:
            result = loop.run()
    except KeyboardInterrupt:
        print_interrupted(loop.run_id or "?", archive_hint(archive_path))
        raise typer.Exit(130) from None
    elapsed = time.monotonic() - start
    logger.info("run %s %s (%s)", result.run_id, result.status, result.reason)
    board = leaderboard(archive, run_id=result.run_id, limit=RUN_LEADERBOARD_ROWS)
    summary = run_summary(archive, result.run_id)
    summary["near_duplicates"] = summary_line(loop.state.to_dict(), loop.config.to_dict())
    print_run_report(result, board, summary, elapsed, config.budget, archive_hint(archive_path))
    path = default_path([result.run_id], all_runs=False)
    if report:
        try:
            written = write_report(archive, [result.run_id], path)
        except ReportError as error:  # the run is archived; only its page is missing
            logger.error("the report was not written: %s", error)
            say(f"report: not written ({error})")
        else:
            say(f"report: {written.path.resolve()}")
    else:
        say(f"report: metarl report {result.run_id}{archive_hint(archive_path)} writes {path}")
    archive.close()
