"""`metarl es` (and the other black-box methods): options to a method config, the run with a
rich progress bar, then the leaderboard of the run's exports.

Every method's candidates are scored by the same sandboxed cascade as `metarl discover`'s, on
the same seeds, so `metarl leaderboard --all-runs` ranks them together (`--method` filters).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Annotated, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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
    verbose_option,
)
from metarl.evaluation.text import printable
from metarl.logs import log_to_stderr
from metarl.tasks import is_network_task

logger = logging.getLogger(__name__)


# `metarl es`'s options, as Typer reads them
TaskOption = Annotated[
    Optional[str],
    typer.Option(
        "--task",
        help="What to meta-learn: drift (LPO, default), optimizer (OPEN-lite) or lpg "
        "(Learned Policy Gradient, on grid suites).",
    ),
]
SuiteOption = Annotated[Optional[str], typer.Option("--suite", help="Environment suite.")]
MetaOption = Annotated[
    Optional[str],
    typer.Option(
        "--meta",
        help="With a task family suite (bandit-tasks, point-tasks, pendulum-tasks): score "
        "members by adaptation under rl2 or maml (maml: --task optimizer).",
    ),
]
PopulationOption = Annotated[
    Optional[int], typer.Option("--population", help="ES population (even).")
]
GenerationsOption = Annotated[
    Optional[int], typer.Option("--generations", help="Generations (total over resumes).")
]
HiddenOption = Annotated[Optional[int], typer.Option("--hidden", help="Meta-network width.")]
MemberSeedsOption = Annotated[
    Optional[int], typer.Option("--member-seeds", help="Training runs per member per generation.")
]
TrainSeedsOption = Annotated[
    Optional[int],
    typer.Option("--train-seeds", help="Training seeds of each export's cascade evaluation."),
]
TimestepsOption = Annotated[
    Optional[int],
    typer.Option("--timesteps", help="Per-environment training budget; 0 = the suite's own."),
]
ExportEveryOption = Annotated[
    Optional[int],
    typer.Option("--export-every", help="Score the ES mean every this many generations."),
]
RngSeedOption = Annotated[Optional[int], typer.Option("--rng-seed", help="RNG seed of the search.")]
HeldoutOption = Annotated[
    Optional[bool],
    typer.Option("--heldout/--no-heldout", help="Score the exports' held-out environments."),
]
MaxTimeOption = Annotated[
    Optional[str], typer.Option("--max-time", help="Wall-time budget: 600, 10m, 1h, none.")
]
ResumeOption = Annotated[
    Optional[str], typer.Option("--resume", help="Continue ES run RUN from its last generation.")
]
UnsafeNoSandboxOption = Annotated[
    bool,
    typer.Option(
        "--unsafe-no-sandbox", help="Score exports WITHOUT bubblewrap (trusted code only)."
    ),
]
CurriculumOption = Annotated[
    Optional[str],
    typer.Option(
        "--curriculum",
        help="lpg: how each generation's levels are drawn: uniform, plr (replay by an "
        "actor-critic's positive value loss) or groove (by algorithmic regret).",
    ),
]
BufferSizeOption = Annotated[
    Optional[int], typer.Option("--buffer-size", help="lpg: levels the curriculum's buffer holds.")
]
ReplayProbOption = Annotated[
    Optional[float],
    typer.Option("--replay-prob", help="lpg: chance a generation replays buffered levels."),
]
LifetimeConditioningOption = Annotated[
    Optional[bool],
    typer.Option(
        "--ta-lpg/--no-ta-lpg", help="lpg: condition the network on the agent's lifetime (TA-LPG)."
    ),
]
EnvWorkersOption = Annotated[
    Optional[int], typer.Option("--env-workers", help="lpg: environments per agent (GROOVE: 64).")
]
EvalUpdatesOption = Annotated[
    Optional[int],
    typer.Option(
        "--eval-updates",
        help="lpg: exports' lifetime on named levels (default: the longest drawn; GROOVE 2500).",
    ),
]


def es(
    task: TaskOption = None,
    suite: SuiteOption = None,
    meta: MetaOption = None,
    population: PopulationOption = None,
    generations: GenerationsOption = None,
    hidden: HiddenOption = None,
    member_seeds: MemberSeedsOption = None,
    train_seeds: TrainSeedsOption = None,
    seed_values: Optional[str] = seed_values_option(),
    timesteps: TimestepsOption = None,
    export_every: ExportEveryOption = None,
    rng_seed: RngSeedOption = None,
    heldout: HeldoutOption = None,
    max_time: MaxTimeOption = None,
    resume: ResumeOption = None,
    unsafe_no_sandbox: UnsafeNoSandboxOption = False,
    curriculum: CurriculumOption = None,
    buffer_size: BufferSizeOption = None,
    replay_prob: ReplayProbOption = None,
    lifetime_conditioning: LifetimeConditioningOption = None,
    env_workers: EnvWorkersOption = None,
    eval_updates: EvalUpdatesOption = None,
    archive: str = archive_option(),
    verbose: bool = verbose_option(),
) -> None:
    """Meta-learn an RL component with evolution strategies over a meta-network.

    Tasks: drift (the LPO meta-network; zero weights are PPO-clip), optimizer (OPEN-lite;
    zero weights are Adam), lpg (the Learned Policy Gradient network, meta-trained on random
    grid levels drawn by a curriculum, GROOVE's LPG-ES).

    evosax's OpenAI-ES searches the network's weights; every few generations the ES mean is
    exported as candidate source, scored by the cascade and archived (method es).

    Defaults are the paper's ES settings (population 64, sigma and lr 0.03 decaying); on a CPU
    use a smaller population.

    Examples:

      metarl es --suite smoke --population 8 --generations 4 --export-every 2

      metarl es --population 16 --generations 10 --max-time 1h

      metarl es --resume r4 --generations 20

      metarl es --task lpg --suite grid-random --curriculum groove --population 16
      metarl es --suite bandit-tasks --meta rl2 --population 8    # LPO scored by adaptation
    """
    # lazy: the ES imports jax and evosax; `metarl --help` stays fast
    from metarl.archives.queries import leaderboard
    from metarl.archives.runs import raised_time_budget
    from metarl.archives.store import Archive
    from metarl.blackbox.es import ESRun
    from metarl.blackbox.lpg_es import LPGRun
    from metarl.rl.suites import meta_suite_name
    from metarl.tasks import meta_task_problem

    log_to_stderr(verbose)
    if meta is not None:
        suite = meta_suite_name(suite or "", meta)
    if suite is not None:
        problem = meta_task_problem(task or "drift", suite)
        if problem:
            raise UserError(problem)
    chosen = {
        "task": task,
        "suite": suite,
        "population": population,
        "hidden": hidden,
        "member_seeds": member_seeds,
        "train_seeds": train_seeds,
        "seed_values": parse_seed_values(seed_values),
        "timesteps": timesteps,
        "export_every": export_every,
        "rng_seed": rng_seed,
        "heldout": heldout,
        "curriculum": curriculum,
        "buffer_size": buffer_size,
        "replay_prob": replay_prob,
        "lifetime_conditioning": lifetime_conditioning,
        "env_workers": env_workers,
        "eval_updates": eval_updates,
    }
    budgets = {"generations": generations, "unsafe_no_sandbox": unsafe_no_sandbox or None}
    if max_time is not None:  # "none" lifts the limit: None is a value here
        budgets["max_time"] = parse_duration(max_time)
    config = _es_config(archive, resume, chosen, budgets)
    with Archive(archive, must_exist=bool(resume)) as store:
        with _ESProgress(config.generations) as view:
            method = LPGRun if is_network_task(config.task) else ESRun
            run = method(config, store, resume=resume, on_event=view)
            start = time.monotonic()
            with interrupts_stop_cleanly():
                result = run.run()
        elapsed = time.monotonic() - start
        board = leaderboard(store, run_id=result.run_id, limit=RUN_LEADERBOARD_ROWS)
        hint = archive_hint(archive)
        display.say(
            f"ES run {result.run_id} {result.status} ({result.reason}) after "
            f"{elapsed:.0f} s: {result.generation} generations, "
            f"{result.exports} exports"
        )
        if board.rows:
            display.console.print(display.leaderboard_table(board))
        if result.status != "finished":
            raised = ""  # the cap counts over the run's sessions: the same one stops at once
            if result.status == "stopped" and result.reason.startswith("time budget"):
                raised = f" {raised_time_budget(run.elapsed())}"
            display.say(f"continue with: metarl es --resume {result.run_id}{raised}{hint}")
        display.say(f"all methods side by side: metarl leaderboard --all-runs{hint}")
    if result.status == "interrupted":
        raise typer.Exit(130)


def _es_config(archive_path: str, resume: str | None, chosen: dict, budgets: dict):
    """The run's ESConfig: the defaults (or the resumed run's stored options), then the options
    given; checked before any archive is created.

    Raises:
        UserError: a search option that differs from the resumed run's.
        ESConfigError: a bad option (a usage error, as the CLI reports it).
    """
    # lazy: the ES config imports jax through the meta-networks
    from metarl.blackbox.config import ESConfig

    fields = {f.name for f in dataclasses.fields(ESConfig)}
    values = run_options(archive_path, resume, chosen, budgets, fields)
    return ESConfig(**values).resolved()


class _ESProgress:
    """A rich progress bar over generations (best and mean fitness of the last one), and one
    line per scored export; usable as the run's `on_event`."""

    def __init__(self, generations: int):
        self.progress = Progress(
            TextColumn("[bold]ES"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}", markup=False),
            TimeElapsedColumn(),
            console=display.console,
            transient=False,
        )
        self.bar = self.progress.add_task("es", total=generations, info="starting")

    def __enter__(self) -> "_ESProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def __call__(self, kind: str, data: dict) -> None:
        if kind == "generation":
            fitness = data["fitness"]
            info = (
                f"best {float(fitness.max()):.3f}  mean {float(fitness.mean()):.3f}  "
                f"sigma {data['sigma']:.4f}  {data['seconds']:.0f} s/gen"
            )
            self.progress.update(self.bar, completed=data["generation"], info=info)
        elif kind == "export":
            score = "—" if data["fitness"] is None else f"{data['fitness']:.3f}"
            why = f" ({data['reason']})" if data.get("reason") else ""
            display.say(
                f"export {data['id']} (generation {data['generation']}): {data['status']}, "
                f"cascade fitness {score}{why}"
            )
        elif kind == "status":
            self.progress.update(self.bar, info=printable(data["text"]))


def distil(
    teacher: str = typer.Argument(..., help="The candidate to distil (an id, e.g. r3-7)."),
    hidden: int = typer.Option(32, "--hidden", help="Width of the student network."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Adam steps."),
    objective: Optional[str] = typer.Option(
        None, "--objective", help="slope (match d drift/dr, the paper's), value or both."
    ),
    points: Optional[int] = typer.Option(None, "--points", help="Grid points per axis."),
    rng_seed: Optional[int] = typer.Option(None, "--rng-seed", help="RNG seed of the fit."),
    seed_values: Optional[str] = seed_values_option(),
    archive: str = archive_option(),
    verbose: bool = verbose_option(),
) -> None:
    """Distil a drift candidate into an LPO network of another width.

    The teacher (an ES export, an LLM's program, a seed) is sampled in the sandbox, matched by
    gradient on the grid, scored like the teacher and archived (method distil, parent = the
    teacher).

    Examples:

      metarl distil r4-3 --hidden 32

      metarl distil r1-2 --hidden 128 --objective both --steps 20000
    """
    # lazy: distillation imports jax; `metarl --help` stays fast
    from metarl.archives.store import Archive
    from metarl.blackbox.derive import distil_teacher
    from metarl.blackbox.distil import DistilSettings

    log_to_stderr(verbose)
    chosen = {"steps": steps, "objective": objective, "points": points, "rng_seed": rng_seed}
    settings = DistilSettings(hidden=hidden, **{k: v for k, v in chosen.items() if v is not None})
    with Archive(archive, must_exist=True) as store:
        limits = _pinned(seed_values)
        result = _derive(
            lambda status: distil_teacher(store, teacher, settings, limits=limits, on_status=status)
        )
    _print_derived("distilled", result, archive)


def symbolic(
    teacher: str = typer.Argument(..., help="The candidate to fit (an id, e.g. r3-7)."),
    objective: Optional[str] = typer.Option(
        None, "--objective", help="value (match the drift) or slope (match d drift/dr)."
    ),
    max_length: Optional[int] = typer.Option(None, "--max-length", help="Most nodes."),
    max_depth: Optional[int] = typer.Option(None, "--max-depth", help="Deepest expression."),
    generations: Optional[int] = typer.Option(None, "--generations", help="GP generations."),
    search_time: Optional[int] = typer.Option(None, "--search-time", help="Search seconds."),
    backend: Optional[str] = typer.Option(None, "--backend", help="operon or pysr."),
    rng_seed: Optional[int] = typer.Option(None, "--rng-seed", help="RNG seed of the search."),
    seed_values: Optional[str] = seed_values_option(),
    archive: str = archive_option(),
    verbose: bool = verbose_option(),
) -> None:
    """Find a closed-form drift for a candidate with symbolic regression.

    pyoperon (PySR when installed) searches expressions over (log r, r-1, A); the formula is
    scored like the teacher and archived (method symbolic, parent = the teacher, with its
    expression and fit error as metadata).

    Examples:

      metarl symbolic r4-3

      metarl symbolic r2-5 --objective slope --max-length 30 --search-time 120
    """
    # lazy: the fit imports jax and pyoperon; `metarl --help` stays fast
    from metarl.archives.store import Archive
    from metarl.symbolic.derive import symbolic_teacher
    from metarl.symbolic.settings import SymbolicSettings

    log_to_stderr(verbose)
    chosen = {
        "objective": objective,
        "max_length": max_length,
        "max_depth": max_depth,
        "generations": generations,
        "max_time_s": search_time,
        "backend": backend,
        "rng_seed": rng_seed,
    }
    try:
        settings = SymbolicSettings(**{k: v for k, v in chosen.items() if v is not None})
    except ValueError as error:
        raise UserError(str(error)) from None
    with Archive(archive, must_exist=True) as store:
        limits = _pinned(seed_values)
        result = _derive(
            lambda status: symbolic_teacher(
                store, teacher, settings, limits=limits, on_status=status
            )
        )
    expression = result.meta.get("expression")
    if expression:
        display.say(
            f"f = {expression}  (size {result.meta['size']}, value MSE "
            f"{result.meta['value_error']:.3g}, slope MSE {result.meta['slope_error']:.3g})"
        )
    _print_derived("symbolic fit of", result, archive)


def _pinned(seed_values: str | None) -> dict | None:
    """The derivation's evaluation limits for `--seed-values` (None: drawn seeds)."""
    values = parse_seed_values(seed_values)
    return {"seed_values": values} if values else None


def _derive(work):
    """Run a derivation with a status spinner; a teacher that cannot be sampled is one line."""
    # lazy: the cascade imports jax
    from metarl.evaluation.cascade import SampleFailure

    with display.console.status("starting") as status:
        try:
            return work(lambda text: status.update(display.untrusted(text)))
        except SampleFailure as failure:
            raise UserError(f"the teacher could not be sampled ({failure})", 1) from None
        except ValueError as error:  # settings the fit refuses (DistilSettings, a bad grid)
            raise UserError(str(error)) from None


def _print_derived(verb: str, result, archive: str) -> None:
    outcome = result.outcome
    score = "—" if outcome.fitness is None else f"{outcome.fitness:.3f}"
    teacher = "—" if result.teacher_fitness is None else f"{result.teacher_fitness:.3f}"
    status = "passed" if outcome.passed else f"failed at {outcome.stage}: {outcome.reason}"
    display.say(
        f"{verb} {result.teacher_id} -> {result.candidate_id} (run {result.run_id}): {status}; "
        f"fitness {score} (teacher {teacher})"
    )
    display.say(
        f"compare: metarl leaderboard --all-runs{archive_hint(archive)}  ·  "
        f"metarl show {result.candidate_id}{archive_hint(archive)}"
    )
