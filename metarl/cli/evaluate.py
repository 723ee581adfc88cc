"""`metarl evaluate`: run the whole evaluation cascade on candidate files, as one batch."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import typer

from metarl.cli.errors import USAGE, UserError
from metarl.cli.options import (
    archive_option,
    parse_envs,
    parse_seed_values,
    seed_values_option,
    verbose_option,
)
from metarl.cli.verdict import print_outcome, stage_spinner
from metarl.evaluation.settings import CascadeSettings, validate_rates
from metarl.logs import log_to_stderr
from metarl.tasks import task_names

DEFAULTS = CascadeSettings()
logger = logging.getLogger(__name__)


def evaluate(
    paths: list[Path] = typer.Argument(
        ...,
        help="Python files, each defining the task's function (evaluated as one batch); with "
        "--harness discogen also archived candidate ids.",
    ),
    task: Optional[str] = typer.Option(
        None,
        "--task",
        "-t",
        help=f"Which contract the file implements: {', '.join(task_names())}, or lpg (an LPG "
        "network exported by `metarl es --task lpg`: agents it trains on the suite's envs). An "
        "archived candidate's is its own.",
    ),
    suite: str = typer.Option(
        DEFAULTS.suite,
        "--suite",
        "-s",
        help="Environment suite: smoke, classic, minatar, a distribution suite "
        "(grid-small, grid-random, cartpole-params), or a meta-RL task family "
        "(bandit-tasks, point-tasks, pendulum-tasks) with --meta.",
    ),
    meta: Optional[str] = typer.Option(
        None,
        "--meta",
        help="Score on a task family by adaptation on held-out tasks: rl2 or maml.",
    ),
    envs: Optional[str] = typer.Option(
        None,
        "--envs",
        help="Only these environments of the suite, comma-separated (training envs in this "
        "order; validation and test envs only when listed), e.g. Breakout-MinAtar: one game "
        "compared across harnesses or settings. Not for selection.",
    ),
    seeds: Optional[int] = typer.Option(
        None, "--seeds", help="Number of training seeds (drawn); default: the suite's."
    ),
    seed_values: Optional[str] = seed_values_option(),
    as_json: bool = typer.Option(
        False, "--json", help="Print the outcome as one JSON object on stdout."
    ),
    timesteps: Optional[int] = typer.Option(
        None, "--timesteps", help="Override the per-env training budget."
    ),
    short_timesteps: Optional[int] = typer.Option(
        None, "--short-timesteps", help="Override the short-run budget."
    ),
    threshold: float = typer.Option(
        DEFAULTS.short_run_threshold,
        "--short-threshold",
        help="Stop after the short run below this normalised score.",
    ),
    skip_short: bool = typer.Option(
        DEFAULTS.skip_short, "--skip-short", help="Go straight to the full run."
    ),
    heldout: bool = typer.Option(
        DEFAULTS.heldout, "--heldout/--no-heldout", help="Also score the test (held-out) envs."
    ),
    validation: bool = typer.Option(
        True, "--validation/--no-validation", help="Also score the suite's validation envs."
    ),
    lr_sweep: Optional[str] = typer.Option(
        None,
        "--lr-sweep",
        help="Sweep the learning rate: 5 (log grid around each env's tuned rate) or 1e-4,3e-4.",
    ),
    lr_aggregation: str = typer.Option(
        DEFAULTS.lr_aggregation, "--lr-aggregation", help="A swept env's score: best or mean."
    ),
    timeout: float = typer.Option(
        DEFAULTS.timeout_s, "--timeout", help="Wall-clock limit (s) for stages 2-4."
    ),
    memory_mb: int = typer.Option(
        DEFAULTS.memory_mb, "--memory-mb", help="Memory limit of the sandbox worker."
    ),
    probe_seed: Optional[int] = typer.Option(
        DEFAULTS.probe_seed, "--probe-seed", help="Fix the probes' random inputs."
    ),
    harness: str = typer.Option(
        "metarl",
        "--harness",
        help="Whose harness scores it: metarl (the cascade) or discogen (DiscoGen's run_main.py "
        "in metarl's sandbox, against DiscoGen's base module; README, DiscoGen).",
    ),
    test: bool = typer.Option(
        False, "--test", help="--harness discogen: DiscoGen's test side (Asterix, SpaceInvaders)."
    ),
    settings_items: Optional[list[str]] = typer.Option(
        None,
        "--set",
        help="--harness discogen: KEY=VALUE replacing a value of every game's config, e.g. "
        "TOTAL_TIMESTEPS=100000 (repeatable).",
    ),
    discogen_python: Optional[str] = typer.Option(
        None,
        "--discogen-python",
        help="--harness discogen: the Python with DiscoGen (default: $METARL_DISCOGEN_PYTHON).",
    ),
    archive_path: str = archive_option(),
    record: bool = typer.Option(
        True,
        "--record/--no-record",
        help="--harness discogen: archive each result as an external evaluation beside ours "
        "(shown by `metarl show` and the report; never used for selection).",
    ),
    unsafe_no_sandbox: bool = typer.Option(
        DEFAULTS.unsafe_no_sandbox,
        "--unsafe-no-sandbox",
        help="Run the candidate WITHOUT bubblewrap (it can then read this machine's files "
        "and keys).",
    ),
    verbose: bool = verbose_option(),
) -> None:
    """Run the evaluation cascade (static, probes, short run, full run) on candidate files
    and print where each stopped and why, with per-environment scores. Several files are
    evaluated as one batch: checked and probed one by one, trained together (one compiled
    program per environment), each scored exactly as it would be alone.

    Examples:

      metarl evaluate metarl/tasks/drift/seed_programs/lpo.py --task drift --suite smoke

      metarl evaluate my_drift.py --task drift --suite classic --seeds 8
      metarl evaluate ppo_clip.py --task drift --suite bandit-tasks --meta rl2

      metarl evaluate my_rule.py --task optimizer --json > outcome.json

      metarl evaluate my_drift.py --task drift --seed-values 1822,77,90311,5  # re-run a score

      metarl evaluate metarl/tasks/drift/seed_programs/*.py --task drift --suite smoke

      metarl evaluate my_drift.py --task drift --suite minatar --envs Breakout-MinAtar

      metarl evaluate my_drift.py --task drift --harness discogen --envs Breakout-MinAtar \
          --set TOTAL_TIMESTEPS=100000

      metarl evaluate r3-12 --harness discogen --test  # an archived candidate, DiscoGen's test side

    Exit status: 0 when every candidate passed every stage, 1 when one stopped at a stage (the
    reason is printed, and is in the JSON: one object for one file, a list of objects with
    their "path" for several), 2 on a usage error or when the sandbox cannot run.
    """
    log_to_stderr(verbose)
    # lazy: the LPG config and evaluator import jax; `metarl --help` and the archive commands
    # stay fast
    from metarl.blackbox.config import LPG_TASK
    from metarl.evaluation.lpg_evaluation import lpg_evaluator
    from metarl.rl.suites import get_suite, meta_suite_name, suite_names
    from metarl.tasks import meta_task_problem

    if harness not in ("metarl", "discogen"):
        raise UserError(f"unknown harness {harness!r}; choose one of: metarl, discogen")
    if harness == "metarl" and (test or settings_items or discogen_python or not record):
        raise UserError(
            "--test, --set, --discogen-python and --no-record are options of --harness discogen"
        )
    if harness == "discogen":
        return _evaluate_discogen(
            paths, task, test, envs, discogen_python, settings_items, timeout, memory_mb,
            unsafe_no_sandbox, as_json, meta or lr_sweep or seed_values or seeds,
            archive_path, record,
        )  # fmt: skip
    known = [*task_names(), LPG_TASK]
    if task is None:
        raise UserError(f"--task: which contract the files implement ({', '.join(known)})")
    if task not in known:
        raise UserError(f"unknown task {task!r}; choose one of: {', '.join(known)}")
    suite = meta_suite_name(suite, meta)
    if suite not in suite_names():
        get_suite(suite)  # a task family without --meta says so
        raise UserError(f"unknown suite {suite!r}; choose one of: {', '.join(suite_names())}")
    problem = meta_task_problem(task, suite)
    if problem:
        raise UserError(problem)
    sources = [_read_candidate(path) for path in paths]
    for name, value in (
        ("--seeds", seeds),
        ("--timesteps", timesteps),
        ("--short-timesteps", short_timesteps),
    ):
        if value is not None and value < 1:
            raise UserError(f"{name} must be at least 1")
    if timeout <= 0 or memory_mb <= 0:
        raise UserError("--timeout and --memory-mb must be positive")
    pinned = parse_seed_values(seed_values)
    if pinned is not None and seeds is not None and seeds != len(pinned):
        raise UserError(f"--seeds {seeds} but {len(pinned)} --seed-values; give one of them")

    # lazy: the cascade imports jax; `metarl --help` and the archive commands stay fast
    from metarl.evaluation.cascade import Evaluator
    from metarl.evaluation.sandbox import SandboxUnavailable

    env_list = parse_envs(envs)
    if env_list is not None and task == LPG_TASK:
        raise UserError("--envs is an option of the drift and optimizer tasks, not lpg")
    settings = CascadeSettings(
        suite=suite,
        envs=env_list,
        seeds=len(pinned) if pinned else seeds or get_suite(suite).default_seeds,
        seed_values=pinned,
        short_run_threshold=threshold,
        total_timesteps=timesteps,
        short_timesteps=short_timesteps,
        timeout_s=timeout,
        memory_mb=memory_mb,
        heldout=heldout,
        validation=validation,
        lr_sweep=lr_sweep,
        lr_aggregation=lr_aggregation,
        skip_short=skip_short,
        probe_seed=probe_seed,
        unsafe_no_sandbox=unsafe_no_sandbox,
    )
    logger.info("evaluating %s as task %s with %s", [str(p) for p in paths], task, asdict(settings))
    try:
        validate_rates(lr_sweep, lr_aggregation)
    except ValueError as error:
        raise UserError(str(error)) from None
    try:
        if task == LPG_TASK:  # an LPG network is data, trained in this process (no sandbox)
            evaluator = lpg_evaluator(get_suite(suite), settings)
        else:
            evaluator = Evaluator(settings, workers=1, prewarm=False)
    except SandboxUnavailable as error:
        raise UserError(error.message, USAGE, hint=error.hint) from None  # see the help
    except ValueError as error:
        raise UserError(str(error)) from None
    with evaluator:
        if as_json:
            outcomes = evaluator.evaluate_batch(sources, task)
        else:
            with stage_spinner([path.name for path in paths]) as progress:
                outcomes = evaluator.evaluate_batch(sources, task, progress=progress)
    for path, outcome in zip(paths, outcomes):
        logger.info(
            "%s: %s at stage %s (fitness %s) in %.1fs",
            path.name,
            "passed" if outcome.passed else "failed",
            outcome.stage,
            outcome.fitness,
            outcome.timings.get("total", float("nan")),
        )

    if as_json:
        if len(paths) == 1:
            typer.echo(json.dumps(outcomes[0].to_dict()))
        else:
            typer.echo(
                json.dumps([{"path": str(p), **o.to_dict()} for p, o in zip(paths, outcomes)])
            )
    else:
        for path, outcome in zip(paths, outcomes):
            print_outcome(outcome, path, task, settings)
    raise typer.Exit(0 if all(outcome.passed for outcome in outcomes) else 1)


def _evaluate_discogen(
    paths, task, test, envs, discogen_python, settings_items, timeout, memory_mb,
    unsafe_no_sandbox, as_json, metarl_only, archive_path, record,
) -> None:  # fmt: skip
    """`--harness discogen` (metarl.cli.discogen.evaluate_discogen); exits 0 when all passed."""
    # lazy: the harness imports the task layer (jax)
    from metarl.cli.discogen import evaluate_discogen
    from metarl.discogen.modules import MODULE_OF_TASK
    from metarl.evaluation.settings import SandboxLimits

    if task is not None and task not in MODULE_OF_TASK:
        raise UserError(f"--harness discogen scores {' and '.join(MODULE_OF_TASK)}, not {task!r}")
    if metarl_only:
        raise UserError(
            "--meta, --lr-sweep, --seeds and --seed-values are metarl's: DiscoGen fixes its own "
            "seeds and learning rates"
        )
    if timeout <= 0 or memory_mb <= 0:
        raise UserError("--timeout and --memory-mb must be positive")
    env_list = parse_envs(envs)
    limits = SandboxLimits(
        timeout_s=timeout, memory_mb=memory_mb, unsafe_no_sandbox=unsafe_no_sandbox
    )
    from metarl.evaluation.isolation import SandboxUnavailable  # lazy: as the harness

    try:
        passed = evaluate_discogen(
            [str(path) for path in paths], task, test, env_list, discogen_python,
            settings_items, limits, as_json, archive_path, record,
        )  # fmt: skip
    except SandboxUnavailable as error:
        raise UserError(error.message, USAGE, hint=error.hint) from None
    raise typer.Exit(0 if passed else 1)


def _read_candidate(path: Path) -> str:
    """The candidate's source; UserError when `path` is not a readable text file."""
    if not path.exists():
        raise UserError(f"no such file: {path}")
    if not path.is_file():
        raise UserError(f"not a file: {path}")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"cannot read {path}: {error}") from None
