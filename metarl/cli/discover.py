"""`metarl discover` (the main job) and `metarl resume`."""

from __future__ import annotations

import signal
import time
from collections import deque
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from metarl.cli._shared import (
    ARCHIVE_HELP,
    console,
    err_console,
    fate_text,
    fmt,
    fmt_seconds,
    handles_user_errors,
    leaderboard_table,
    parse_duration,
    user_error,
)

DISCOVER_HELP = """Run the evolutionary search: propose programs, evaluate them, archive everything.

With no options it runs offline (mutation proposer) on the `drift` task and the `classic`
suite with a reduced budget that finishes in about 10 minutes on a 2-core CPU, then prints a
leaderboard of the discovered candidates next to the seeds.

Examples:

  metarl discover

  metarl discover --suite smoke --budget 5

  metarl discover --budget 40 --max-time 1h --workers 2 --seed 1

  metarl discover --proposer llm --model openai/gpt-4o-mini --max-cost 2

  metarl discover --config discover.toml

  metarl discover --resume r3 --budget 60
"""


class Display:
    """Renders loop events: a live rich panel on a terminal, one line per event otherwise."""

    def __init__(self, live: bool, budget: int, quiet: bool = False):
        self.live_enabled = live
        self.quiet = quiet
        self.recent: deque = deque(maxlen=10)
        self.inflight: dict[str, str] = {}
        self.status = "starting"
        self.best: dict | None = None
        self.run_id = "?"
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TextColumn("[dim]{task.fields[extra]}"),
            console=console,
        )
        self.task_id = self.progress.add_task("candidates", total=budget, extra="")
        self.live: Live | None = None
        self.state: dict = {}

    def __enter__(self):
        if self.live_enabled:
            self.live = Live(self.render(), console=console, refresh_per_second=2, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.update(self.render())
            self.live.__exit__(*exc)
            self.live = None

    def line(self, text: str) -> None:
        if not self.live_enabled and not self.quiet:
            console.print(text, highlight=False, soft_wrap=True, markup=False)

    def __call__(self, kind: str, data: dict) -> None:
        state = data.get("state")
        if state:
            self.state = state
            self.progress.update(
                self.task_id,
                completed=state.get("done", 0),
                total=state.get("budget"),
                extra=self._extra(state),
            )
        if kind == "run":
            self.run_id = data["run_id"]
            verb = "resuming" if data.get("resumed") else "started"
            cfg = data["config"]
            self.line(
                f"{verb} run {self.run_id}: task {cfg['task']}, suite {cfg['suite']}, "
                f"proposer {cfg['proposer']}, budget {cfg['budget']} candidates, "
                f"{cfg['seeds']} seeds x {cfg['timesteps']} steps per env"
            )
        elif kind == "status":
            self.status = data["text"]
            self.line(f"… {data['text']}")
        elif kind == "submitted":
            self.inflight[data["id"]] = data.get("name") or ""
        elif kind == "candidate":
            self.inflight.pop(data["id"], None)
            self.recent.appendleft(data)
            tag = "seed" if data.get("is_seed") else (data.get("operator") or "")
            cached = " (cached)" if data.get("cached") else ""
            fitness = f" fitness {fmt(data['fitness'])}" if data.get("fitness") is not None else ""
            self.line(
                f"{data['id']:>8} {data.get('name') or '—':<18} {tag:<20} "
                f"{fate_text(data).plain}{fitness}{cached} [{fmt_seconds(data.get('eval_s'))}]"
            )
        elif kind == "confirm":
            self.line(
                f"… confirmed {data['id']} ({data.get('name')}): fitness {fmt(data['fitness'])} "
                f"-> {fmt(data['confirmed'])} on more seeds"
            )
        elif kind == "generation":
            self.best = {"id": data.get("incumbent"), "score": data.get("score")}
            self.line(
                f"— generation {data['generation']} done; incumbent {data.get('incumbent')} "
                f"({fmt(data.get('score'))})"
            )
        elif kind == "done":
            self.status = f"{data['status']}: {data['reason']}"
        if self.live is not None:
            self.live.update(self.render())

    def _extra(self, state: dict) -> str:
        parts = [f"gen {state.get('generation', 0)}", fmt_seconds(state.get("elapsed_s"))]
        if state.get("max_time"):
            parts[-1] += f" / {fmt_seconds(state['max_time'])}"
        if state.get("cost_usd"):
            parts.append(f"${state['cost_usd']:.3f}")
        return " · ".join(parts)

    def render(self):
        table = Table(
            header_style="bold", expand=False, title="recent candidates", title_justify="left"
        )
        for column in ("id", "name", "gen", "operator", "fate", "fitness", "time"):
            table.add_column(
                column, justify="right" if column in ("gen", "fitness", "time") else "left"
            )
        for row in self.recent:
            cells = [
                row["id"],
                row.get("name") or "—",
                str(row.get("generation") or 0),
                "seed" if row.get("is_seed") else (row.get("operator") or "—"),
                fate_text(row),
                fmt(row.get("fitness")),
                fmt_seconds(row.get("eval_s")),
            ]
            table.add_row(*[c if isinstance(c, Text) else Text(c) for c in cells])
        incumbent = self.state.get("incumbent")
        best = Text.assemble(("best: ", "bold"), (str(incumbent or "—"), "cyan"))
        if self.best and self.best.get("score") is not None:
            best.append(f"  score {fmt(self.best['score'])}")
        inflight = ", ".join(f"{k} {v}" for k, v in self.inflight.items()) or "—"
        return Group(
            Text.assemble(
                ("metarl discover ", "bold"),
                (f"run {self.run_id}", "cyan"),
                ("  " + self.status, "dim"),
            ),
            self.progress,
            best,
            Text(f"evaluating: {inflight}", style="dim"),
            table,
        )


def _build_proposer(config):
    if config.proposer == "mutation":
        # lazy: keeps `metarl --help` and the archive commands fast (no jax import)
        from metarl.discovery.proposers.mutation import MutationProposer

        return MutationProposer()
    try:
        # lazy: keeps `metarl --help` and the archive commands fast (no jax import)
        from metarl.discovery.proposers.llm import build_llm_proposer
    except ImportError as error:
        raise user_error(f"the LLM proposer is unavailable: {error}") from None
    options = {
        "models": list(config.models),
        "api_base": config.api_base,
        "mode": config.mode,
        "timeout_s": config.llm_timeout,
        "max_concurrency": config.max_concurrency,
        "temperature": config.temperature,
        "seed": config.seed,
    }
    try:
        return build_llm_proposer({k: v for k, v in options.items() if v is not None})
    except ValueError as error:
        raise user_error(str(error)) from None


def _sigterm_as_interrupt():
    """SIGTERM stops a run like Ctrl-C (cleanly, resumable); returns the previous handler."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:
        return None  # not the main thread: leave it


def run_discovery(
    config, archive_path: str, resume: str | None, live: bool | None, quiet: bool
) -> None:
    # lazy: keeps `metarl --help` and the archive commands fast (no jax import)
    from metarl.archives.queries import leaderboard, run_summary
    from metarl.archives.store import Archive
    from metarl.discovery.loop import DiscoveryLoop

    if resume:
        archive = Archive(archive_path, must_exist=True)
    else:
        archive = Archive(archive_path)
    proposer = _build_proposer(config)
    if live is None:
        live = console.is_terminal and not quiet
    display = Display(live=live, budget=config.budget, quiet=quiet)
    loop = DiscoveryLoop(archive, config, proposer, resume=resume, on_event=display)
    previous = _sigterm_as_interrupt()
    start = time.monotonic()
    try:
        with display:
            result = loop.run()
    except KeyboardInterrupt:
        run_id = loop.run_id or "?"
        err_console.print(
            f"interrupted; the archive is consistent. Continue with: metarl resume {run_id}"
            + (f" --archive {archive_path}" if archive_path != "metarl.db" else ""),
            markup=False,
            highlight=False,
        )
        raise typer.Exit(130) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    elapsed = time.monotonic() - start
    board = leaderboard(archive, run_id=result.run_id, limit=15)
    console.print(leaderboard_table(board))
    summary = run_summary(archive, result.run_id)
    fates = ", ".join(f"{n} {s}" for s, n in sorted(summary["by_status"].items())) or "none"
    stopped = ", ".join(f"{n} at {s}" for s, n in sorted(summary["stopped_at"].items()))
    console.print(
        f"run {result.run_id} {result.status} ({result.reason}) in {fmt_seconds(elapsed)}: "
        f"{result.candidates} candidates ({fates}{'; stopped ' + stopped if stopped else ''}); "
        f"best {result.best_id} ({fmt(result.best_fitness)})",
        highlight=False,
        markup=False,
    )
    hint = f" --archive {archive_path}" if archive_path != "metarl.db" else ""
    if result.status != "finished":
        extra = ""
        if "time budget" in result.reason:
            extra = " --max-time 30m"
        elif "cost budget" in result.reason:
            extra = " --max-cost 5"
        console.print(
            f"continue with: metarl resume {result.run_id}{extra}{hint}",
            highlight=False,
            markup=False,
        )
    elif result.candidates >= config.budget:
        console.print(
            f"search further with: metarl resume {result.run_id} --budget "
            f"{config.budget * 2}{hint}",
            highlight=False,
            markup=False,
        )
    if result.best_id:
        console.print(
            f"inspect: metarl show {result.best_id}{hint} · metarl lineage {result.best_id}{hint}",
            highlight=False,
            markup=False,
        )
    archive.close()


def _collect(config_file: Path | None, cli: dict) -> "object":
    # lazy: keeps `metarl --help` and the archive commands fast (no jax import)
    from metarl.discovery.config import DiscoverConfig, load_config_file

    values = DiscoverConfig().to_dict()
    if config_file is not None:
        values.update(load_config_file(config_file))
    for key, value in cli.items():
        if value is not None and value != []:
            values[key] = value
    return DiscoverConfig.from_dict(values).resolved()


def _resume_config(archive_path: str, run_id: str, overrides: dict, forbidden: dict):
    # lazy: keeps `metarl --help` and the archive commands fast (no jax import)
    from metarl.archives.store import Archive
    from metarl.discovery.config import ConfigError, DiscoverConfig

    with Archive(archive_path, must_exist=True) as archive:
        run = archive.get_run(run_id)
    stored = run.get("config") or {}
    for key, value in forbidden.items():
        if value is not None and value != [] and stored.get(key) != value:
            raise ConfigError(
                f"run {run_id} was started with {key} {stored.get(key)!r}; it cannot change on "
                f"resume (start a new run instead)"
            )
    values = {**stored, **{k: v for k, v in overrides.items() if v is not None}}
    return DiscoverConfig.from_dict(values).resolved()


def register(app: typer.Typer) -> None:
    @app.command("discover", help=DISCOVER_HELP)
    @handles_user_errors
    def discover(
        task: Optional[str] = typer.Option(
            None, "--task", help="What to discover: drift or optimizer. [default: drift]"
        ),
        suite: Optional[str] = typer.Option(
            None, "--suite", help="Environment suite: smoke, classic, minatar. [default: classic]"
        ),
        proposer: Optional[str] = typer.Option(
            None, "--proposer", help="mutation (offline) or llm. [default: mutation]"
        ),
        budget: Optional[int] = typer.Option(
            None, "--budget", help="Candidates to propose (seeds not counted). [default: 12]"
        ),
        archive: str = typer.Option(
            "metarl.db", "--archive", envvar="METARL_ARCHIVE", help=ARCHIVE_HELP
        ),
        workers: Optional[int] = typer.Option(
            None, "--workers", help="Concurrent evaluations. [default: 1]"
        ),
        seed: Optional[int] = typer.Option(
            None, "--seed", help="RNG seed of the search. [default: 0]"
        ),
        config_file: Optional[Path] = typer.Option(
            None, "--config", help="TOML file with defaults for these options."
        ),
        resume: Optional[str] = typer.Option(
            None, "--resume", help="Continue run RUN exactly where it stopped."
        ),
        max_time: Optional[str] = typer.Option(
            None, "--max-time", help="Wall-time budget: 600, 10m, 1h, none. [default: 9m]"
        ),
        max_cost: Optional[float] = typer.Option(
            None, "--max-cost", help="LLM cost budget in USD."
        ),
        seeds: Optional[int] = typer.Option(
            None, "--seeds", help="Training seeds per evaluation. [default: 2]"
        ),
        timesteps: Optional[int] = typer.Option(
            None,
            "--timesteps",
            help="Per-environment training budget; 0 = the suite's own. [default: 100000]",
        ),
        children: Optional[int] = typer.Option(
            None, "--children", help="Children per generation. [default: 4]"
        ),
        islands: Optional[int] = typer.Option(
            None, "--islands", help="Number of islands. [default: 2]"
        ),
        population: Optional[int] = typer.Option(
            None, "--population", help="Members kept per island. [default: 6]"
        ),
        confirm: Optional[bool] = typer.Option(
            None,
            "--confirm/--no-confirm",
            help="Re-evaluate a new best on more seeds before it becomes the incumbent.",
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
        unsafe_no_sandbox: bool = typer.Option(
            False,
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
            None, "--live/--no-live", help="Live display (default: on a terminal)."
        ),
        quiet: bool = typer.Option(
            False, "--quiet", "-q", help="Only print the final leaderboard."
        ),
    ) -> None:
        duration = parse_duration(max_time) if max_time is not None else None
        overrides = {
            "budget": budget,
            "workers": workers,
            "max_cost": max_cost,
            "api_base": api_base,
            "llm_timeout": llm_timeout,
            "max_concurrency": max_concurrency,
            "timeout": timeout,
        }
        if unsafe_no_sandbox:
            overrides["unsafe_no_sandbox"] = True
        if max_time is not None:
            overrides["max_time"] = duration
        if resume and config_file is not None:
            raise user_error(
                "--config cannot be combined with --resume: a run keeps its settings "
                "(change budgets with --budget, --max-time, --max-cost)"
            )
        if resume:
            config = _resume_config(
                archive,
                resume,
                overrides,
                {
                    "task": task,
                    "suite": suite,
                    "proposer": proposer,
                    "seed": seed,
                    "seeds": seeds,
                    "timesteps": timesteps,
                    "children": children,
                    "islands": islands,
                    "population": population,
                    "mode": mode,
                    "models": model or None,
                    "confirm": confirm,
                    "heldout": heldout,
                    "skip_short": skip_short,
                },
            )
        else:
            cli = {
                "task": task,
                "suite": suite,
                "proposer": proposer,
                "seed": seed,
                "seeds": seeds,
                "timesteps": timesteps,
                "children": children,
                "islands": islands,
                "population": population,
                "confirm": confirm,
                "heldout": heldout,
                "skip_short": skip_short,
                "models": list(model),
                "mode": mode,
                "temperature": temperature,
                **overrides,
            }
            config = _collect(config_file, cli)
        if max_time is not None and duration is None:  # "--max-time none" lifts the limit
            config.max_time = None
        run_discovery(config, archive, resume, live, quiet)

    @app.command("resume")
    @handles_user_errors
    def resume_command(
        run: str = typer.Argument(..., help="The run to continue, e.g. r3."),
        archive: str = typer.Option(
            "metarl.db", "--archive", envvar="METARL_ARCHIVE", help=ARCHIVE_HELP
        ),
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
        api_base: Optional[str] = typer.Option(
            None, "--api-base", help="OpenAI-compatible server URL."
        ),
        live: Optional[bool] = typer.Option(
            None, "--live/--no-live", help="Live display (default: on a terminal)."
        ),
        quiet: bool = typer.Option(
            False, "--quiet", "-q", help="Only print the final leaderboard."
        ),
    ) -> None:
        """Continue a stopped, interrupted or killed run exactly (alias of discover --resume).

        Examples:

          metarl resume r3

          metarl resume r3 --budget 40 --max-time 30m
        """
        overrides = {
            "budget": budget,
            "max_cost": max_cost,
            "workers": workers,
            "api_base": api_base,
        }
        duration = parse_duration(max_time) if max_time is not None else None
        if max_time is not None:
            overrides["max_time"] = duration
        config = _resume_config(archive, run, overrides, {})
        if max_time is not None and duration is None:
            config.max_time = None
        run_discovery(config, archive, run, live, quiet)
