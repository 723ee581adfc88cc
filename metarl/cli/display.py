"""What the commands print: number formats, rich tables, panels and trees, the live display of
a discovery run, and the report of an evaluation. No argument handling, no archive access."""

from __future__ import annotations

import math
import sys
from collections import deque
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.progress import BarColumn, Progress, TextColumn
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

# Off a terminal (logs, pipes, CI) rich would assume 80 columns and squeeze the tables.
console = Console() if sys.stdout.isatty() else Console(width=140)
err_console = Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=140)

STAGE_LABELS = {
    "static": "static check",
    "probes": "probes",
    "short": "short run",
    "full": "full run",
}
TIMING_KEYS = (
    "static",
    "wait_worker",
    "probes",
    "short",
    "full",
    "compile",
    "run",
    "baseline",
    "teardown",
    "total",
)
RUN_STATUS_STYLES = {
    "finished": "green",
    "running": "cyan",
    "stopped": "yellow",
    "interrupted": "yellow",
    "killed": "red",
    "failed": "red",
}
PROMPT_CHARS = 1200  # of an LLM call's prompt and reply shown without `show --full`


# -- numbers --------------------------------------------------------------------------------------


def fmt(value, digits: int = 3) -> str:
    """A number with `digits` decimals; "—" for None and non-finite floats."""
    if value is None:
        return "—"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "—"
        return f"{value:.{digits}f}"
    return str(value)


def fmt_compact(value, digits: int = 3) -> str:
    """Like `fmt`, but large values in `digits` significant digits and "-" for none."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}g}" if abs(value) >= 1000 else f"{value:.{digits}f}"


def fmt_interval(value, interval, digits: int = 3, number: Callable = fmt) -> str:
    """A score and its 95% bootstrap interval over seeds: "0.93 [0.81, 1.02]" (digits=2); the
    score alone when there is no interval (one seed, or archived before intervals)."""
    if value is None or not interval:
        return number(value, digits)
    low, high = interval
    return f"{number(value, digits)} [{number(low, digits)}, {number(high, digits)}]"


def fmt_published(published: dict | None, digits: int = 2) -> str:
    """Scores normalised against published PPO returns, labelled: "DiscoBench 0.71 · ..."."""
    return " · ".join(f"{label} {fmt(value, digits)}" for label, value in (published or {}).items())


def fmt_seconds(seconds: float | None) -> str:
    """12s, 4m05s, 1h30m; "—" for None."""
    if seconds is None:
        return "—"
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def fmt_duration(seconds: float | None) -> str:
    """A duration as `--max-time` reads it: 9m, 1.5h, 90s; "none" for no limit."""
    if seconds is None:
        return "none"
    for unit, scale in (("h", 3600), ("m", 60)):
        if seconds >= scale and seconds % scale == 0:
            return f"{seconds // scale:.0f}{unit}"
    return f"{seconds:g}s"


def fmt_cost(cost: float | None) -> str:
    """An unknown price (a model missing from litellm's offline cost map) reads "unknown"."""
    return "unknown" if cost is None else f"${cost:.4f}"


# -- cells ----------------------------------------------------------------------------------------


def fate_text(row: dict) -> Text:
    """A candidate's fate: passed, duplicate of X, or the stage it stopped at and why."""
    status = row.get("status")
    if status == "passed":
        return Text("passed", style="green")
    if status == "duplicate":
        return Text(f"duplicate of {row.get('duplicate_of') or '?'}", style="yellow")
    if status == "no_code":
        return Text(f"no program: {row.get('reason') or ''}"[:70], style="red")
    reason = (row.get("reason") or "").replace("\n", " ")
    return Text(f"{row.get('stage')}: {reason}"[:90], style="red")


def _plain(*cells) -> list[Text]:
    """Cells as Text, so that archived strings are never parsed as rich markup."""
    return [c if isinstance(c, Text) else Text(str(c)) for c in cells]


class _Grid:
    """A two-column grid (bold label, value) whose values are plain text, never markup."""

    def __init__(self):
        self.table = Table.grid(padding=(0, 2))
        self.table.add_column(style="bold")
        self.table.add_column()

    def add_row(self, label: str, value) -> None:
        self.table.add_row(label, value if isinstance(value, Text) else Text(str(value)))

    def __rich__(self):
        return self.table


# -- archive views --------------------------------------------------------------------------------


def leaderboard_table(board, *, show_run: bool = False) -> Table:
    """A `metarl.archives.queries.leaderboard` as a table, one column per environment."""
    table = Table(title=f"leaderboard — {board.title}", title_justify="left", header_style="bold")
    ids = [row.id for row in board.rows] or [""]
    names = [row.name or "—" for row in board.rows] or [""]
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("candidate", no_wrap=True, min_width=min(12, max(map(len, ids))))
    if show_run or board.mixed:
        table.add_column("run")
    if board.mixed:
        table.add_column("task/suite")
    table.add_column("name", no_wrap=True, min_width=min(20, max(map(len, names))))
    for env in board.envs:
        table.add_column(env, justify="right", no_wrap=True)
    table.add_column("fitness", justify="right", no_wrap=True)
    table.add_column("confirmed", justify="right", no_wrap=True)
    table.add_column("held-out", justify="right", no_wrap=True)
    # the method column where methods can differ: --all, or a board that mixes them
    show_method = show_run or len({row.method for row in board.rows}) > 1
    if show_method:
        table.add_column("method")
    table.add_column("gen", justify="right")
    table.add_column("proposer", overflow="ellipsis")
    if board.reference is not None:
        table.add_column("comparable", no_wrap=True)
    for row in board.rows:
        cells = [str(row.rank), row.id]
        if show_run or board.mixed:
            cells.append(row.run_id)
        if board.mixed:
            cells.append(f"{row.task}/{row.suite}")
        cells.append(Text(row.name or "—", style="cyan" if row.is_seed else "bold"))
        cells += [fmt(row.env_scores.get(env)) for env in board.envs]
        cells += [
            fmt_interval(row.fitness, row.fitness_ci, 2),
            fmt_interval(row.confirmed, row.confirmed_ci, 2),
            fmt_interval(row.heldout, row.heldout_ci, 2),
            *([row.method] if show_method else []),
            str(row.generation),
            row.proposer or "—",
        ]
        if board.reference is not None:
            cells.append(comparable_text(row.differs))
        table.add_row(*_plain(*cells))
    if board.reference is not None:
        table.caption = (
            f"compared against {board.reference.describe()}; rows marked ≠ were scored in "
            "another setting and do not compare with it"
        )
        table.caption_justify = "left"
    return table


def comparable_text(differs: list[str]) -> Text:
    """ "yes", or "≠ seeds, budget" in red: what differs from the board's reference setting."""
    if not differs:
        return Text("yes", style="green")
    return Text("≠ " + ", ".join(differs), style="red")


def _row_interval(row: dict, score: str) -> list | None:
    """[low, high] from an archived row's `{score}_low`/`{score}_high`; None when absent."""
    low, high = row.get(f"{score}_low"), row.get(f"{score}_high")
    return [low, high] if low is not None and high is not None else None


def _candidate_header(cid: str, row: dict, children: list[str]) -> _Grid:
    header = _Grid()
    header.add_row("candidate", f"{cid}  {row['name'] or ''}")
    header.add_row("run", f"{row['run_id']} · task {row['task']} · suite {row['suite']}")
    header.add_row("fate", fate_text(row))
    header.add_row(
        "fitness",
        f"{fmt_interval(row['fitness'], _row_interval(row, 'fitness'))} on seeds {row['seeds']}"
        + (
            " · confirmed "
            f"{fmt_interval(row['confirmed_fitness'], _row_interval(row, 'confirmed_fitness'))} on "
            f"{len(row['confirmed_seeds'] or [])} seeds"
            if row.get("confirmed_seeds")
            else ""
        ),
    )
    held = "confirmed_heldout" if row["confirmed_heldout"] is not None else "heldout"
    header.add_row("held-out", fmt_interval(row[held], _row_interval(row, held)))
    if any(_row_interval(row, s) for s in ("fitness", "confirmed_fitness", held)):
        header.add_row("", "[low, high]: 95% bootstrap interval over the training seeds")
    origin = (
        "seed program"
        if row["is_seed"]
        else f"generation {row['generation']}"
        + (f" · island {row['island']}" if row.get("island") is not None else "")
    )
    header.add_row(
        "origin",
        f"{origin} · method {row.get('method') or 'discovery'} · {row['proposer'] or '—'} · "
        f"{row['operator'] or '—'}",
    )
    if row.get("meta"):  # the method's own numbers (ES fitness, fit errors): never a rank
        header.add_row(
            "method data",
            " · ".join(
                f"{k} {fmt(v) if isinstance(v, float) else v}" for k, v in row["meta"].items()
            ),
        )
    header.add_row("parents", ", ".join(row["parent_ids"] or []) or "—")
    header.add_row("children", ", ".join(children) or "—")
    header.add_row("budget", f"{row['total_timesteps']} steps per env · eval key {row['eval_key']}")
    header.add_row("hash", f"{row['hash']} · fingerprint {row['fingerprint'] or '—'}")
    if row.get("cached_from"):
        header.add_row(
            "cached", f"scores reused from {row['cached_from']} (same program, same evaluation)"
        )
    if row.get("timings"):
        header.add_row(
            "timings",
            " · ".join(
                f"{k} {fmt_seconds(v)}"
                for k, v in row["timings"].items()
                if isinstance(v, (int, float))
            ),
        )
    if row.get("cost_usd") is not None or row.get("prompt_tokens") is not None:
        header.add_row(
            "LLM",
            f"tokens {row['prompt_tokens']}+{row['completion_tokens']} · "
            f"cost {fmt_cost(row['cost_usd'])} · latency {fmt(row['latency_s'], 1)}s",
        )
    if row.get("warnings"):
        header.add_row("warnings", "; ".join(row["warnings"]))
    return header


def _evaluations_table(evaluations: list[dict]) -> Table:
    table = Table(
        title="evaluations (normalised [95% bootstrap interval over seeds])",
        title_justify="left",
        header_style="bold",
    )
    for column in (
        "purpose",
        "env",
        "stage",
        "seeds",
        "steps",
        "return",
        "normalised",
        "baseline",
        "random",
        "compile",
        "run",
    ):
        table.add_column(
            column,
            justify="left" if column in ("purpose", "env", "stage") else "right",
            no_wrap=column in ("purpose", "env", "return", "normalised"),
        )
    for ev in evaluations:
        env = ev["env"] + (" (held-out)" if ev["heldout"] else "")
        table.add_row(
            *_plain(
                ev["purpose"],
                env,
                ev["stage"],
                str(len(ev["seeds"] or [])),
                str(ev["total_timesteps"]),
                f"{fmt(ev['mean'], 1)} ± {fmt(ev['std'], 1)}",
                fmt_interval(ev["normalised"], _row_interval(ev, "normalised"), 2)
                if _row_interval(ev, "normalised")
                else fmt(ev["normalised"]),
                fmt(ev["baseline_mean"], 1),
                fmt(ev["random_mean"], 1),
                fmt_seconds(ev["compile_s"]),
                fmt_seconds(ev["run_s"]),
            )
        )
    return table


def _published_table(evaluations: list[dict]) -> Table | None:
    """Scores against published PPO returns (MinAtar), one column per source; None if none."""
    shown = [ev for ev in evaluations if ev.get("published")]
    if not shown:
        return None
    labels = list(dict.fromkeys(label for ev in shown for label in ev["published"]))
    table = Table(
        title="vs published PPO: (return - random) / (published return - random)",
        title_justify="left",
        header_style="bold",
    )
    for column in ("purpose", "env", "stage", "steps", *labels):
        table.add_column(column, justify="right" if column in labels else "left")
    for ev in shown:
        env = ev["env"] + (" (held-out)" if ev["heldout"] else "")
        cells = [ev["purpose"], env, ev["stage"], str(ev["total_timesteps"])]
        table.add_row(*_plain(*cells, *(fmt(ev["published"].get(label)) for label in labels)))
    return table


def _print_call(index: int, count: int, call: dict, full: bool) -> None:
    meta = (
        f"model {call['model']} · tokens "
        f"{call['prompt_tokens']}+{call['completion_tokens']}"
        f" · cost {fmt_cost(call['cost_usd'])} · latency {fmt(call['latency_s'], 1)}s"
    )
    if call.get("error"):
        meta += f" · error: {call['error']}"
    prompt = "\n\n".join(f"[{m.get('role')}]\n{m.get('content')}" for m in (call["prompt"] or []))
    reply = call.get("reply") or ""
    if not full:
        limit = PROMPT_CHARS
        prompt = prompt if len(prompt) <= limit else "… " + prompt[-limit:]
        reply = reply if len(reply) <= limit else reply[:limit] + " …"
    console.print(Panel(Text(meta), title=f"LLM call {index}/{count}", title_align="left"))
    console.print(
        Panel(
            Text(prompt),
            title="prompt" + ("" if full else " (end; --full for all)"),
            title_align="left",
            style="dim",
        )
    )
    console.print(Panel(Text(reply), title="reply", title_align="left"))


def print_candidate(
    cid: str,
    row: dict,
    evaluations: list[dict],
    calls: list[dict],
    children: list[str],
    *,
    full: bool,
) -> None:
    """`metarl show`: header, failure reason, thought, code, evaluations, LLM calls."""
    header = _candidate_header(cid, row, children)
    console.print(Panel(header, title=f"[bold]{cid}", title_align="left"))
    if row.get("reason"):
        console.print(
            Panel(Text(row["reason"]), title="failure reason", title_align="left", style="red")
        )
    if row.get("thought"):
        console.print(Panel(Text(row["thought"]), title="thought", title_align="left"))
    if row.get("code"):
        console.print(
            Panel(
                Syntax(row["code"], "python", line_numbers=True, theme="ansi_dark"),
                title="code",
                title_align="left",
            )
        )
    if evaluations:
        console.print(_evaluations_table(evaluations))
        published = _published_table(evaluations)
        if published is not None:
            console.print(published)
    for index, call in enumerate(calls, 1):
        _print_call(index, len(calls), call, full)


def _node_label(node: dict) -> Text:
    text = Text()
    text.append(node["id"], style="cyan")
    if node.get("missing"):
        text.append("  (not in this archive)", style="red")
        return text
    text.append(f"  {node['name'] or '—'}", style="bold")
    if node["is_seed"]:
        text.append("  seed", style="dim")
    else:
        text.append(
            f"  gen {node['generation']}  {node['operator'] or node['proposer']}", style="dim"
        )
    if node["status"] == "passed":
        text.append(f"  fitness {fmt(node['fitness'])}", style="green")
        if node.get("confirmed") is not None:
            text.append(f" (confirmed {fmt(node['confirmed'])})", style="green")
    else:
        text.append(f"  {node['status']} at {node['stage']}", style="red")
    if node.get("repeat"):
        text.append("  (ancestry shown above)", style="dim")
    return text


def lineage_tree(root: dict) -> Tree:
    """A `metarl.archives.queries.lineage` result as a tree, the candidate at its root."""
    tree = Tree(_node_label(root))

    def grow(branch: Tree, node: dict) -> None:
        for parent in node["parents"]:
            grow(branch.add(_node_label(parent)), parent)

    grow(tree, root)
    return tree


def runs_table(runs: list[dict], archive_path: str) -> Table:
    """The archive's runs: status, task, suite, progress, best candidate, time, cost."""
    table = Table(title=f"runs in {archive_path}", title_justify="left", header_style="bold")
    right = ("candidates", "gen", "fitness", "time", "cost")
    for column in (
        "run",
        "status",
        "task",
        "suite",
        "method",
        "proposer",
        "candidates",
        "gen",
        "best",
        "fitness",
        "time",
        "cost",
        "started",
    ):
        table.add_column(column, justify="right" if column in right else "left")
    for run in runs:
        status = Text(run["shown_status"], style=RUN_STATUS_STYLES.get(run["shown_status"], ""))
        if run.get("stop_reason") and run["shown_status"] != "finished":
            status.append(f" ({run['stop_reason']})", style="dim")
        table.add_row(
            *_plain(
                run["id"],
                status,
                run["task"],
                run["suite"],
                run.get("method") or "discovery",
                run["proposer"] or "—",
                f"{run['candidates_count'] or 0}"
                + (f"/{run['budget_candidates']}" if run.get("budget_candidates") else ""),
                str(run["generation"] or 0),
                run["best_id"] or "—",
                fmt(run["best_fitness"]),
                fmt_seconds(run["elapsed_s"]),
                f"${run['cost_usd']:.3f}" if run.get("cost_usd") else "—",
                (run["started_at"] or "")[:19],
            )
        )
    return table


# -- a discovery run ------------------------------------------------------------------------------


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
            table.add_row(
                *_plain(
                    row["id"],
                    row.get("name") or "—",
                    str(row.get("generation") or 0),
                    "seed" if row.get("is_seed") else (row.get("operator") or "—"),
                    fate_text(row),
                    fmt(row.get("fitness")),
                    fmt_seconds(row.get("eval_s")),
                )
            )
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


def _say(text: str, *, err: bool = False) -> None:
    """One plain line (never markup, never highlighted) on stdout or stderr."""
    (err_console if err else console).print(text, highlight=False, markup=False)


def print_interrupted(run_id: str, archive_hint: str) -> None:
    """After Ctrl-C or SIGTERM: the archive is fine, and how to continue."""
    _say(
        "interrupted; the archive is consistent. Continue with: "
        f"metarl resume {run_id}{archive_hint}",
        err=True,
    )


def print_run_report(
    result, board, summary: dict, elapsed: float, budget: int, archive_hint: str
) -> None:
    """After a discovery run: its leaderboard, a summary line, and what to run next.

    Args:
        result: the loop's result (run_id, status, reason, candidates, best_id, best_fitness).
        board: the run's leaderboard; summary: `metarl.archives.queries.run_summary`.
        elapsed: this invocation's wall time; budget: the run's candidate budget.
        archive_hint: " --archive PATH" for the follow-up commands, or "".
    """
    console.print(leaderboard_table(board))
    fates = ", ".join(f"{n} {s}" for s, n in sorted(summary["by_status"].items())) or "none"
    stopped = ", ".join(f"{n} at {s}" for s, n in sorted(summary["stopped_at"].items()))
    _say(
        f"run {result.run_id} {result.status} ({result.reason}) in {fmt_seconds(elapsed)}: "
        f"{result.candidates} candidates ({fates}{'; stopped ' + stopped if stopped else ''}); "
        f"best {result.best_id} ({fmt(result.best_fitness)})"
    )
    if result.status != "finished":
        extra = ""
        if "time budget" in result.reason:
            extra = " --max-time 30m"
        elif "cost budget" in result.reason:
            extra = " --max-cost 5"
        _say(f"continue with: metarl resume {result.run_id}{extra}{archive_hint}")
    elif result.candidates >= budget:
        _say(
            f"search further with: metarl resume {result.run_id} --budget "
            f"{budget * 2}{archive_hint}"
        )
    if result.best_id:
        _say(
            f"inspect: metarl show {result.best_id}{archive_hint} · "
            f"metarl lineage {result.best_id}{archive_hint}"
        )


# -- an evaluation --------------------------------------------------------------------------------


@contextmanager
def stage_spinner(names: list[str]) -> Iterator[Callable[[int, str], None]]:
    """A spinner on stderr naming each candidate's cascade stage; yields the
    `progress(index, stage)` callback of `Evaluator.evaluate_batch`."""
    stages = {name: "waiting" for name in names}
    with err_console.status(f"{', '.join(names)}: starting the sandbox workers") as status:

        def progress(index: int, stage: str) -> None:
            stages[names[index]] = STAGE_LABELS.get(stage, stage)
            status.update("; ".join(f"{name}: {label}" for name, label in stages.items()))

        yield progress


def _scores_table(outcome, title: str) -> Table:
    table = Table(title=title)
    for column, justify in (
        ("env", "left"),
        ("stage", "left"),
        ("steps", "right"),
        ("return", "right"),
        ("normalised", "right"),
        ("compile s", "right"),
        ("run s", "right"),
        ("env-steps/s", "right"),
    ):
        table.add_column(column, justify=justify, overflow="fold")
    for score in outcome.env_scores:
        name = score.env + (" (held-out)" if score.heldout else "")
        table.add_row(
            name,
            score.stage,
            f"{score.total_timesteps:,}",
            f"{fmt_compact(score.mean, 1)} ± {fmt_compact(score.std, 1)}",
            fmt_interval(score.normalised, score.normalised_ci, number=fmt_compact),
            fmt_compact(score.compile_s, 1),
            fmt_compact(score.run_s, 1),
            f"{score.steps_per_s:,.0f}" if score.steps_per_s else "-",
        )
    return table


def print_outcome(outcome, path: Path, task: str, settings) -> None:
    """`metarl evaluate`: per-environment scores, the verdict, warnings, timings, and the
    candidate's captured output when it failed."""
    plural = "s" if settings.seeds != 1 else ""
    title = f"{path.name} · task {task} · suite {settings.suite} · {settings.seeds} seed{plural}"
    if outcome.env_scores:
        console.print(_scores_table(outcome, title))
        console.print(
            "normalised = (return - random policy) / (baseline seed - random policy), same seeds "
            "and budget; "
            + "; ".join(
                f"{s.env}: random {fmt_compact(s.random_mean, 1)}, "
                f"baseline {fmt_compact(s.baseline_mean, 1)}"
                for s in outcome.env_scores
                if s.stage == "full" or len(outcome.env_scores) == 1
            ),
            style="dim",
            highlight=False,
        )
        published = [s for s in outcome.env_scores if s.published]
        if published:
            console.print(
                "vs published PPO returns, (return - random) / (published - random): "
                + "; ".join(f"{s.env}: {fmt_published(s.published)}" for s in published),
                style="dim",
                highlight=False,
            )
    else:
        console.print(title)
    if outcome.passed:
        held = (
            f", held-out {fmt_interval(outcome.heldout, outcome.heldout_ci, number=fmt_compact)}"
            if outcome.heldout is not None
            else ""
        )
        fitness = fmt_interval(outcome.fitness, outcome.fitness_ci, number=fmt_compact)
        console.print(
            Text.assemble(("PASSED", "bold green"), f" every stage: fitness {fitness}{held}")
        )
    else:
        console.print(
            Text.assemble(
                ("FAILED", "bold red"), " at stage ", (outcome.stage, "bold"), f": {outcome.reason}"
            )
        )
    for warning in outcome.warnings:
        console.print(Text.assemble(("warning: ", "yellow"), warning))
    if outcome.fingerprint:
        console.print(f"fingerprint {outcome.fingerprint}", style="dim")
    timings = " · ".join(
        f"{k} {outcome.timings[k]:.1f}s" for k in TIMING_KEYS if k in outcome.timings
    )
    if timings:
        console.print(f"timings: {timings}", style="dim")
    if outcome.stdout.strip() and not outcome.passed:
        lines = outcome.stdout.strip().splitlines()
        console.print("captured output (truncated):", style="dim")
        console.print(
            "\n".join(lines[:20]) + ("\n..." if len(lines) > 20 else ""),
            markup=False,
            highlight=False,
        )
