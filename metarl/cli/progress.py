"""A discovery run on the terminal (`metarl discover`, `metarl resume`): the live panel or one
line per loop event, what to do after Ctrl-C, and the report at the end.

The events carry the proposer's names, the candidates' failure reasons and the loop's status
texts, which quote them: every such string is printed through `console.say` or as
`console.untrusted` Text.
"""

from __future__ import annotations

from collections import deque

from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from metarl.cli.board import fate_text, leaderboard_table
from metarl.cli.console import cells, console, say, untrusted
from metarl.cli.formats import fmt, fmt_seconds
from metarl.evaluation.text import printable


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
            TextColumn("{task.description}", style="bold", markup=False),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}", markup=False),
            TextColumn("{task.fields[extra]}", style="dim", markup=False),
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
        """One event as a line, when there is no live panel (and not --quiet)."""
        if not self.live_enabled and not self.quiet:
            say(text)

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
                f"… raced {data['id']} ({data.get('name')}) against {data.get('incumbent')} on "
                f"validation: {fmt(data['confirmed'])} over {data.get('runs')} seeds, "
                f"P(better) {fmt(data.get('poi'))} [{fmt(data.get('poi_low'))}, "
                f"{fmt(data.get('poi_high'))}]: {data.get('verdict')}"
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

    def render(self) -> Group:
        """The live panel: run and status, progress, incumbent, in flight, recent candidates."""
        table = Table(
            header_style="bold", expand=False, title="recent candidates", title_justify="left"
        )
        for column in ("id", "name", "gen", "operator", "fate", "fitness", "time"):
            table.add_column(
                column, justify="right" if column in ("gen", "fitness", "time") else "left"
            )
        for row in self.recent:
            table.add_row(
                *cells(
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
        best = Text.assemble(("best: ", "bold"), (printable(incumbent or "—"), "cyan"))
        if self.best and self.best.get("score") is not None:
            best.append(f"  score {fmt(self.best['score'])}")
        inflight = ", ".join(f"{k} {v}" for k, v in self.inflight.items()) or "—"
        return Group(
            Text.assemble(
                ("metarl discover ", "bold"),
                (printable(f"run {self.run_id}"), "cyan"),
                (printable("  " + self.status), "dim"),
            ),
            self.progress,
            best,
            untrusted(f"evaluating: {inflight}", "dim"),
            table,
        )


def print_interrupted(run_id: str, archive_hint: str) -> None:
    """After Ctrl-C or SIGTERM: the archive is fine, and how to continue."""
    say(
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
    say(
        f"run {result.run_id} {result.status} ({result.reason}) in {fmt_seconds(elapsed)}: "
        f"{result.candidates} candidates ({fates}{'; stopped ' + stopped if stopped else ''}); "
        f"best {result.best_id} ({fmt(result.best_fitness)})"
    )
    if summary.get("near_duplicates"):  # discovery/novelty.py `summary_line`
        say(summary["near_duplicates"])
    if result.status != "finished":
        extra = ""
        if "time budget" in result.reason:
            extra = " --max-time 30m"
        elif "cost budget" in result.reason:
            extra = " --max-cost 5"
        say(f"continue with: metarl resume {result.run_id}{extra}{archive_hint}")
    elif result.candidates >= budget:
        say(
            f"search further with: metarl resume {result.run_id} --budget "
            f"{budget * 2}{archive_hint}"
        )
    if result.best_id:
        say(
            f"inspect: metarl show {result.best_id}{archive_hint} · "
            f"metarl lineage {result.best_id}{archive_hint}"
        )
