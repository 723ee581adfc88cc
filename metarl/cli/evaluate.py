"""`metarl evaluate`: run the whole evaluation cascade on candidate files, as one batch."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from metarl.cli.errors import USAGE, UserError
from metarl.cli.options import (
    archive_option,
    parse_envs,
    parse_seed_values,
    seed_values_option,
    task_list,
    verbose_option,
)
from metarl.cli.verdict import print_outcome, stage_spinner
from metarl.evaluation.settings import CascadeSettings, validate_rates
from metarl.logs import log_to_stderr
from metarl.tasks import (
    UnknownTask,
    check_known,
    is_network_task,
    known_task_names,
    network_task_names,
    task_names,
)

DEFAULTS = CascadeSettings()
logger = logging.getLogger(__name__)


# the options, as Typer reads them (`Annotated`, so the command's signature stays one line each)
Paths = Annotated[
    list[Path],
    typer.Argument(
        help="Python files, each defining the task's function (evaluated as one batch); with "
        "--harness discogen also archived candidate ids.",
    ),
]
TaskOption = Annotated[
    Optional[str],
    typer.Option(
        "--task",
        "-t",
        help=f"Which contract the file implements: {task_list(known_task_names())}. A network "
        f"task's file ({task_list(network_task_names())}) is an export of `metarl es --task "
        "NAME`: agents it trains on the suite's envs. An archived candidate's is its own.",
    ),
]
SuiteOption = Annotated[
    str,
    typer.Option(
        "--suite",
        "-s",
        help="Environment suite: smoke, classic, minatar, a distribution suite "
        "(grid-small, grid-random, cartpole-params), or a meta-RL task family "
        "(bandit-tasks, point-tasks, pendulum-tasks) with --meta.",
    ),
]
MetaOption = Annotated[
    Optional[str],
    typer.Option(
        "--meta", help="Score on a task family by adaptation on held-out tasks: rl2 or maml."
    ),
]
EnvsOption = Annotated[
    Optional[str],
    typer.Option(
        "--envs",
        help="Only these environments of the suite, comma-separated (training envs in this "
        "order; validation and test envs only when listed; only those listed: they alone), "
        "e.g. Breakout-MinAtar: one game compared across harnesses or settings. Not for "
        "selection.",
    ),
]
SeedsOption = Annotated[
    Optional[int],
    typer.Option("--seeds", help="Number of training seeds (drawn); default: the suite's."),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the outcome as one JSON object on stdout.")
]
TimestepsOption = Annotated[
    Optional[int],
    typer.Option(
        "--timesteps", help="Override the per-env training budget (default: the suite's)."
    ),
]
ShortOption = Annotated[
    Optional[int], typer.Option("--short-timesteps", help="Override the short-run budget.")
]
ThresholdOption = Annotated[
    float,
    typer.Option("--short-threshold", help="Stop after the short run below this normalised score."),
]
SkipShortOption = Annotated[bool, typer.Option("--skip-short", help="Go straight to the full run.")]
HeldoutOption = Annotated[
    bool, typer.Option("--heldout/--no-heldout", help="Also score the test (held-out) envs.")
]
ValidationOption = Annotated[
    bool,
    typer.Option("--validation/--no-validation", help="Also score the suite's validation envs."),
]
SweepOption = Annotated[
    Optional[str],
    typer.Option(
        "--lr-sweep",
        help="Sweep the learning rate: 5 (log grid around each env's tuned rate) or 1e-4,3e-4.",
    ),
]
AggregationOption = Annotated[
    str, typer.Option("--lr-aggregation", help="A swept env's score: best or mean.")
]
TimeoutOption = Annotated[
    float, typer.Option("--timeout", help="Wall-clock limit (s) for stages 2-4.")
]
MemoryOption = Annotated[
    int, typer.Option("--memory-mb", help="Memory limit of the sandbox worker.")
]
ProbeSeedOption = Annotated[
    Optional[int], typer.Option("--probe-seed", help="Fix the probes' random inputs.")
]
HarnessOption = Annotated[
    str,
    typer.Option(
        "--harness",
        help="Whose harness scores it: metarl (the cascade) or discogen (DiscoGen's run_main.py "
        "in metarl's sandbox, against DiscoGen's base module; README, DiscoGen).",
    ),
]
TestSideOption = Annotated[
    bool,
    typer.Option(
        "--test", help="--harness discogen: DiscoGen's test side (Asterix, SpaceInvaders)."
    ),
]
SetOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--set",
        help="--harness discogen: KEY=VALUE replacing a value of every game's config, e.g. "
        "TOTAL_TIMESTEPS=100000 (repeatable).",
    ),
]
DiscogenPythonOption = Annotated[
    Optional[str],
    typer.Option(
        "--discogen-python",
        help="--harness discogen: the Python with DiscoGen (default: $METARL_DISCOGEN_PYTHON).",
    ),
]
RecordOption = Annotated[
    bool,
    typer.Option(
        "--record/--no-record",
        help="--harness discogen: archive each result as an external evaluation beside ours "
        "(shown by `metarl show` and the report; never used for selection).",
    ),
]
UnsafeOption = Annotated[
    bool,
    typer.Option(
        "--unsafe-no-sandbox",
        help="Run the candidate WITHOUT bubblewrap (it can then read this machine's files "
        "and keys).",
    ),
]


def evaluate(
    paths: Paths,
    task: TaskOption = None,
    suite: SuiteOption = DEFAULTS.suite,
    meta: MetaOption = None,
    envs: EnvsOption = None,
    seeds: SeedsOption = None,
    seed_values: Optional[str] = seed_values_option(),
    as_json: JsonOption = False,
    timesteps: TimestepsOption = None,
    short_timesteps: ShortOption = None,
    threshold: ThresholdOption = DEFAULTS.short_run_threshold,
    skip_short: SkipShortOption = DEFAULTS.skip_short,
    heldout: HeldoutOption = DEFAULTS.heldout,
    validation: ValidationOption = True,
    lr_sweep: SweepOption = None,
    lr_aggregation: AggregationOption = DEFAULTS.lr_aggregation,
    timeout: TimeoutOption = DEFAULTS.timeout_s,
    memory_mb: MemoryOption = DEFAULTS.memory_mb,
    probe_seed: ProbeSeedOption = DEFAULTS.probe_seed,
    harness: HarnessOption = "metarl",
    test: TestSideOption = False,
    settings_items: SetOption = None,
    discogen_python: DiscogenPythonOption = None,
    archive_path: str = archive_option(),
    record: RecordOption = True,
    unsafe_no_sandbox: UnsafeOption = DEFAULTS.unsafe_no_sandbox,
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
    task = _checked_task(task)
    settings = _settings(
        task, suite, meta, envs, seeds, seed_values, timesteps, short_timesteps,
        CascadeSettings(
            short_run_threshold=threshold, timeout_s=timeout, memory_mb=memory_mb,
            heldout=heldout, validation=validation, lr_sweep=lr_sweep,
            lr_aggregation=lr_aggregation, skip_short=skip_short, probe_seed=probe_seed,
            unsafe_no_sandbox=unsafe_no_sandbox,
        ),
    )  # fmt: skip
    sources = [_read_candidate(path) for path in paths]
    logger.info("evaluating %s as task %s with %s", [str(p) for p in paths], task, asdict(settings))
    outcomes = _run_batch(sources, task, settings, [path.name for path in paths], as_json)
    _print_outcomes(paths, outcomes, task, settings, as_json)
    raise typer.Exit(0 if all(outcome.passed for outcome in outcomes) else 1)


def _checked_task(task: str | None) -> str:
    """`--task`, which must name a registered task (UserError listing them otherwise)."""
    if task is None:
        raise UserError(
            f"--task: which contract the files implement ({', '.join(known_task_names())})"
        )
    try:
        check_known(task)
    except UnknownTask as error:
        raise UserError(str(error).strip("'\"")) from None
    return task


def _settings(
    task: str,
    suite: str,
    meta: str | None,
    envs: str | None,
    seeds: int | None,
    seed_values: str | None,
    timesteps: int | None,
    short_timesteps: int | None,
    limits: CascadeSettings,
) -> CascadeSettings:
    """The run's settings: `limits` (the options taken as given) completed by the suite, its
    envs, seeds and budgets, each checked.

    Raises:
        UserError: an unknown suite, a task the suite cannot score, a budget below 1, seeds that
            disagree with the pinned values, or a bad learning-rate sweep.
    """
    # lazy: suites read distributions and configs (jax); `metarl --help` stays fast
    from metarl.rl.suites import get_suite, meta_suite_name, suite_names
    from metarl.tasks import meta_task_problem

    suite = meta_suite_name(suite, meta)
    if suite not in suite_names():
        get_suite(suite)  # a task family without --meta says so
        raise UserError(f"unknown suite {suite!r}; choose one of: {', '.join(suite_names())}")
    problem = meta_task_problem(task, suite)
    if problem:
        raise UserError(problem)
    for name, value in (
        ("--seeds", seeds),
        ("--timesteps", timesteps),
        ("--short-timesteps", short_timesteps),
    ):
        if value is not None and value < 1:
            raise UserError(f"{name} must be at least 1")
    if limits.timeout_s <= 0 or limits.memory_mb <= 0:
        raise UserError("--timeout and --memory-mb must be positive")
    pinned = parse_seed_values(seed_values)
    if pinned is not None and seeds is not None and seeds != len(pinned):
        raise UserError(f"--seeds {seeds} but {len(pinned)} --seed-values; give one of them")
    env_list = parse_envs(envs)
    if env_list is not None and is_network_task(task):
        raise UserError(
            f"--envs is an option of the program tasks ({', '.join(task_names())}), not {task}"
        )
    try:
        validate_rates(limits.lr_sweep, limits.lr_aggregation)
    except ValueError as error:
        raise UserError(str(error)) from None
    # only validation or test envs listed: score those alone (a re-measurement on fresh seeds)
    train = env_list is None or any(e in get_suite(suite).envs for e in env_list)
    return replace(
        limits,
        suite=suite,
        envs=env_list,
        train=train,
        seeds=len(pinned) if pinned else seeds or get_suite(suite).default_seeds,
        seed_values=pinned,
        total_timesteps=timesteps,
        short_timesteps=short_timesteps,
    )


def _run_batch(
    sources: list[str], task: str, settings: CascadeSettings, names: list[str], quiet: bool
) -> list:
    """Each source's `Outcome`, evaluated as one batch (a spinner per name unless `quiet`).

    A program is scored by the sandboxed cascade; a network task's candidate is data, trained
    in this process by metarl's own code (no sandbox: evaluation/lpg_evaluation.py).
    """
    # lazy: the cascade and the LPG evaluator import jax; `metarl --help` stays fast
    from metarl.evaluation.cascade import Evaluator
    from metarl.evaluation.lpg_evaluation import lpg_evaluator
    from metarl.evaluation.sandbox import SandboxUnavailable
    from metarl.rl.suites import get_suite

    try:
        if is_network_task(task):
            evaluator = lpg_evaluator(get_suite(settings.suite), settings)
        else:
            evaluator = Evaluator(settings, workers=1, prewarm=False)
    except SandboxUnavailable as error:
        raise UserError(error.message, USAGE, hint=error.hint) from None  # see the help
    except ValueError as error:
        raise UserError(str(error)) from None
    with evaluator:
        if quiet:
            outcomes = evaluator.evaluate_batch(sources, task)
        else:
            with stage_spinner(names) as progress:
                outcomes = evaluator.evaluate_batch(sources, task, progress=progress)
    for name, outcome in zip(names, outcomes):
        logger.info(
            "%s: %s at stage %s (fitness %s) in %.1fs",
            name,
            "passed" if outcome.passed else "failed",
            outcome.stage,
            outcome.fitness,
            outcome.timings.get("total", float("nan")),
        )
    return outcomes


def _print_outcomes(
    paths: list[Path], outcomes: list, task: str, settings: CascadeSettings, as_json: bool
) -> None:
    """One JSON object (a list of them, each with its "path", for several files), or tables."""
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
