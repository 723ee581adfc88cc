"""A discovery run on the terminal (`metarl discover`, `metarl resume`): the live panel or one
line per loop event, what to do after Ctrl-C, and the report at the end.

The events carry the proposer's names, the candidates' failure reasons and the loop's status
texts, which quote them: every such string is printed through `console.say` or as
`console.untrusted` Text.
"""

from __future__ import annotations

import time
from collections import deque

from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from metarl.cli.board import fate_text, incumbent_text, leaderboard_table
from metarl.cli.console import cells, console, say, untrusted
from metarl.cli.formats import fmt, fmt_p, fmt_seconds
from metarl.cli.verdict import STAGE_LABELS
from metarl.evaluation.text import printable


class Display:
    """Renders loop events: a live rich panel on a terminal, one line per event otherwise.

    The panel is re-rendered twice a second, not only on events: its clock, the status's
    age and each candidate's time in its stage move while a long batch trains.
    """

    def __init__(self, live: bool, budget: int, quiet: bool = False):
        self.live_enabled = live
        self.quiet = quiet
        self.recent: deque = deque(maxlen=10)
        self.inflight: dict[str, str] = {}
        self.stages: dict[str, tuple[str, float]] = {}  # id -> (stage, since)
        self.status = "starting"
        self.status_since = time.monotonic()
        self.clock = (0.0, time.monotonic())  # the run's elapsed_s as of the last state
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
            self.live = Live(self, console=console, refresh_per_second=2, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.refresh()
            self.live.__exit__(*exc)
            self.live = None

    def __rich__(self) -> Group:
        return self.render()

    def line(self, text: str) -> None:
        """One event as a line, when there is no live panel (and not --quiet)."""
        if not self.live_enabled and not self.quiet:
            say(text)

    def __call__(self, kind: str, data: dict) -> None:
        state = data.get("state")
        if state:
            self.state = state
            self.clock = (float(state.get("elapsed_s") or 0.0), time.monotonic())
            self.progress.update(
                self.task_id, completed=state.get("done", 0), total=state.get("budget")
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
            self.status, self.status_since = data["text"], time.monotonic()
            self.line(f"… {data['text']}")
        elif kind == "submitted":
            self.inflight[data["id"]] = data.get("name") or ""
        elif kind == "stage":
            label = STAGE_LABELS.get(data["stage"], data["stage"])
            self.stages[data["id"]] = (label, time.monotonic())
        elif kind == "candidate":
            self.inflight.pop(data["id"], None)
            self.stages.pop(data["id"], None)
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
                f"… raced {data['id']} ({data.get('name') or '—'}) against "
                f"{data.get('incumbent') or '—'} on "
                f"validation: {fmt(data['confirmed'])} over {data.get('runs')} seeds, "
                f"P(better) {fmt(data.get('poi'))} [{fmt(data.get('poi_low'))}, "
                f"{fmt(data.get('poi_high'))}], exact p {fmt_p(data.get('p'))} at level "
                f"{fmt_p(data.get('level'))}: {data.get('verdict')}"
            )
        elif kind == "stability":
            verdict = data.get("verdict")
            fate = "kept the incumbent" if verdict in ("worse", None) else "holds"
            seen = (
                f"worst on {data.get('env')}: P(better) {fmt(data.get('poi'))} "
                f"[{fmt(data.get('poi_low'))}, {fmt(data.get('poi_high'))}] over "
                f"{data.get('runs')} seeds: {verdict}"
                if verdict
                else "the round scored nothing"
            )
            self.line(
                f"… {data['id']} against {data.get('incumbent') or '—'} at "
                f"{data.get('factor') or 0:g}x the budget: {seen}; {fate}"
            )
        elif kind == "duplicate":
            self.line(
                f"… {data['id']} returns exactly what the incumbent {data['incumbent']} returns "
                f"on {data['runs']} shared seeds: a copy in behaviour, not raced"
            )
        elif kind == "generation":
            self.best = {"id": data.get("incumbent"), "score": data.get("score")}
            self.line(
                f"— generation {data['generation']} done; incumbent "
                f"{data.get('incumbent') or '—'} "
                f"({fmt(data.get('score'))})"
            )
        elif kind == "done":
            self.status = f"{data['status']}: {data['reason']}"
        if self.live is not None:
            self.live.refresh()

    def elapsed(self) -> float:
        """The run's wall time now: its last reported elapsed_s plus the time since."""
        base, at = self.clock
        return base + time.monotonic() - at

    def _extra(self, state: dict) -> str:
        parts = [f"gen {state.get('generation', 0)}", fmt_seconds(self.elapsed())]
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
        best = Text.assemble(("incumbent: ", "bold"), (printable(incumbent or "—"), "cyan"))
        if self.best and self.best.get("score") is not None:
            best.append(f"  score {fmt(self.best['score'])}")
        now = time.monotonic()
        inflight = ", ".join(
            f"{k} {v}"
            + (
                f" ({self.stages[k][0]} {fmt_seconds(now - self.stages[k][1])})"
                if k in self.stages
                else ""
            )
            for k, v in self.inflight.items()
        )
        self.progress.update(self.task_id, extra=self._extra(self.state))
        return Group(
            Text.assemble(
                ("metarl discover ", "bold"),
                (printable(f"run {self.run_id}"), "cyan"),
                (printable(f"  {self.status} ({fmt_seconds(now - self.status_since)})"), "dim"),
            ),
            self.progress,
            best,
            untrusted(f"evaluating: {inflight or '—'}", "dim"),
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
        board: the run's leaderboard; summary: `metarl.archives.incumbents.run_summary` (its
            counts and incumbent, worded as `metarl show RUN` and the report word them).
        elapsed: this invocation's wall time; budget: the run's candidate budget.
        archive_hint: " --archive PATH" for the follow-up commands, or "".
    """
    console.print(leaderboard_table(board))
    fates = ", ".join(f"{n} {s}" for s, n in sorted(summary["by_status"].items())) or "none"
    stopped = ", ".join(f"{n} at {s}" for s, n in sorted(summary["stopped_at"].items()))
    counts, incumbent = summary.get("counts"), summary.get("incumbent")
    scored = counts.describe() if counts else f"{result.candidates} children"
    best = incumbent_text(incumbent)
    rank = next((row.rank for row in board.rows if row.incumbent), None)
    if rank is not None and rank > 1:
        best += f"; #{rank} on the leaderboard, which ranks by train score"
    say(
        f"run {result.run_id} {result.status} ({result.reason}) in {fmt_seconds(elapsed)}: "
        f"{scored} (children: {fates}{'; stopped ' + stopped if stopped else ''}); "
        f"incumbent {best}"
    )
    if summary.get("near_duplicates"):  # discovery/novelty.py `summary_line`
        say(summary["near_duplicates"])
    if result.status != "finished":
        extra = f" {result.resume_options}" if result.resume_options else ""
        say(f"continue with: metarl resume {result.run_id}{extra}{archive_hint}")
    elif result.candidates >= budget:
        say(
            f"search further with: metarl resume {result.run_id} --budget "
            f"{budget * 2}{archive_hint}"
        )
    best_id = incumbent.id if incumbent else result.best_id
    if best_id:
        say(
            f"inspect: metarl show {best_id}{archive_hint} · metarl lineage {best_id}{archive_hint}"
        )
