"""`metarl discover` (the main job) and `metarl resume`: options to a DiscoverConfig, then the
loop, its live display and its report."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Optional

import typer

from metarl.cli import discover_options as flags
from metarl.cli.console import console, say
from metarl.cli.errors import UserError
from metarl.cli.options import (
    RUN_LEADERBOARD_ROWS,
    archive_hint,
    archive_option,
    interrupts_stop_cleanly,
    parse_duration,
    seed_values_option,
    verbose_option,
)
from metarl.cli.progress import Display, print_interrupted, print_run_report
from metarl.errors import MetarlError
from metarl.evaluation.text import has_redactions, redact_config
from metarl.logs import log_to_stderr

logger = logging.getLogger(__name__)


def discover(
    ctx: typer.Context,
    task: flags.TaskOption = None,
    suite: flags.SuiteOption = None,
    meta: flags.MetaOption = None,
    proposer: flags.ProposerOption = None,
    budget: flags.BudgetOption = None,
    archive: str = archive_option(),
    workers: flags.WorkersOption = None,
    trainers: flags.TrainersOption = None,
    executor: flags.ExecutorOption = None,
    ray_address: flags.RayAddressOption = None,
    devices: flags.DevicesOption = None,
    rng_seed: flags.RngSeedOption = None,
    config_file: flags.ConfigFileOption = None,
    resume: flags.ResumeOption = None,
    max_time: flags.MaxTimeOption = None,
    max_cost: flags.MaxCostOption = None,
    seeds: flags.SeedsOption = None,
    seed_values: Optional[str] = seed_values_option(),
    timesteps: flags.TimestepsOption = None,
    children: flags.ChildrenOption = None,
    islands: flags.IslandsOption = None,
    population: flags.PopulationOption = None,
    guidance_every: flags.GuidanceEveryOption = None,
    confirm: flags.ConfirmOption = None,
    confirm_seeds: flags.ConfirmSeedsOption = None,
    race_seeds: flags.RaceSeedsOption = None,
    lr_sweep: flags.LrSweepOption = None,
    lr_aggregation: flags.LrAggregationOption = None,
    curriculum: flags.CurriculumOption = None,
    curriculum_levels: flags.CurriculumLevelsOption = None,
    protocol: flags.ProtocolOption = None,
    heldout: flags.HeldoutOption = None,
    skip_short: flags.SkipShortOption = None,
    fidelity: flags.FidelityOption = None,
    stability: flags.StabilityOption = None,
    timeout: flags.TimeoutOption = None,
    unsafe_no_sandbox: flags.UnsafeNoSandboxOption = None,
    model: flags.ModelOption = None,
    api_base: flags.ApiBaseOption = None,
    mode: flags.ModeOption = None,
    model_choice: flags.ModelChoiceOption = None,
    llm_timeout: flags.LlmTimeoutOption = None,
    max_concurrency: flags.MaxConcurrencyOption = None,
    temperature: flags.TemperatureOption = None,
    live: flags.LiveOption = None,
    quiet: flags.QuietOption = False,
    report: flags.ReportOption = False,
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
    overrides, fixed = flags.split_options(ctx.params)
    if resume and config_file is not None:
        raise UserError(
            "--config cannot be combined with --resume: a run keeps its settings "
            "(change budgets with --budget, --max-time, --max-cost)"
        )
    if resume:
        config = _resume_config(archive, resume, overrides, fixed)
    else:
        config = _collect(config_file, {**fixed, "temperature": temperature, **overrides})
    if max_time is not None and overrides["max_time"] is None:  # "--max-time none" lifts it
        config.max_time = None
    run_discovery(config, archive, resume, live, quiet, verbose, report)


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
    trainers: Optional[int] = typer.Option(
        None, "--trainers", help="A batch's training in this many shares at once (CPU)."
    ),
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
        "trainers": trainers,
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
