"""Archive commands: leaderboard, show, lineage, runs, export. Read-only; safe to run while a
discovery writes to the same archive (WAL: readers never block the writer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from metarl.cli._shared import (
    ARCHIVE_HELP,
    console,
    fate_text,
    fmt,
    fmt_seconds,
    handles_user_errors,
    leaderboard_table,
    user_error,
)


def fmt_cost(cost: float | None) -> str:
    """An unknown price (a model missing from litellm's offline cost map) reads "unknown"."""
    return "unknown" if cost is None else f"${cost:.4f}"


def _open(path: str):
    # lazy: keeps `metarl --help` and the archive commands fast (no jax import)
    from metarl.archives.store import Archive

    return Archive(path, must_exist=True)


def _check_names(task: str | None, suite: str | None) -> None:
    # lazy: keeps `metarl --help` and the archive commands fast (no jax import)
    from metarl.rl.suites import get_suite
    from metarl.tasks import get_task

    if task:
        get_task(task)
    if suite:
        get_suite(suite)


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


class _Grid:
    """A two-column grid whose values are plain text (never parsed as rich markup)."""

    def __init__(self):
        self.table = Table.grid(padding=(0, 2))
        self.table.add_column(style="bold")
        self.table.add_column()

    def add_column(self, *args, **kwargs) -> None:
        pass

    def add_row(self, label: str, value) -> None:
        self.table.add_row(label, value if isinstance(value, Text) else Text(str(value)))

    def __rich__(self):
        return self.table


def _plain(*cells) -> list:
    return [c if isinstance(c, Text) else Text(str(c)) for c in cells]


def register(app: typer.Typer) -> None:
    @app.command("leaderboard")
    @handles_user_errors
    def leaderboard_command(
        run: Optional[str] = typer.Option(
            None, "--run", help="Rank this run's candidates (default: the latest run)."
        ),
        all_runs: bool = typer.Option(False, "--all", help="Rank candidates of every run."),
        task: Optional[str] = typer.Option(None, "--task", help="Only this task."),
        suite: Optional[str] = typer.Option(None, "--suite", help="Only this suite."),
        limit: int = typer.Option(20, "--limit", "-n", help="Rows to show."),
        archive: str = typer.Option(
            "metarl.db", "--archive", envvar="METARL_ARCHIVE", help=ARCHIVE_HELP
        ),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """Rank candidates by fitness (1.0 = as good as the baseline seed).

        Columns: per-env normalised scores, the aggregate fitness, the fitness confirmed on
        more seeds (elites only), the held-out score, generation, proposer.

        Examples:

          metarl leaderboard

          metarl leaderboard --run r2 --limit 10

          metarl leaderboard --all --task drift --suite classic
        """
        # lazy: keeps `metarl --help` and the archive commands fast (no jax import)
        from metarl.archives.queries import leaderboard

        if run and all_runs:
            raise user_error("give either --run RUN or --all, not both")
        if limit < 1:
            raise user_error("--limit must be at least 1")
        _check_names(task, suite)
        with _open(archive) as store:
            board = leaderboard(
                store, run_id=run, all_runs=all_runs, task=task, suite=suite, limit=limit
            )
        if as_json:
            console.print_json(json.dumps([row.__dict__ for row in board.rows], default=str))
            return
        if not board.rows:
            console.print(f"no passed candidates yet ({board.title})")
            return
        console.print(leaderboard_table(board, show_run=all_runs))

    @app.command("show")
    @handles_user_errors
    def show_command(
        candidate: str = typer.Argument(
            ..., help="Candidate id (e.g. r1-7) or a prefix of its source hash."
        ),
        archive: str = typer.Option(
            "metarl.db", "--archive", envvar="METARL_ARCHIVE", help=ARCHIVE_HELP
        ),
        full: bool = typer.Option(False, "--full", help="Show whole LLM prompts and replies."),
    ) -> None:
        """A candidate: code, thought, scores, failure reason, parents, LLM calls.

        Examples:

          metarl show r1-7

          metarl show r2-12 --full
        """
        with _open(archive) as store:
            cid = store.resolve_candidate(candidate)
            row = store.candidate(cid)
            evaluations = store.evaluations(cid)
            calls = store.calls(cid)
            children = store.children(cid)
        header = _Grid()
        header.add_column(style="bold")
        header.add_column()
        header.add_row("candidate", f"{cid}  {row['name'] or ''}")
        header.add_row("run", f"{row['run_id']} · task {row['task']} · suite {row['suite']}")
        header.add_row("fate", fate_text(row))
        header.add_row(
            "fitness",
            f"{fmt(row['fitness'])} on seeds {row['seeds']}"
            + (
                f" · confirmed {fmt(row['confirmed_fitness'])} on "
                f"{len(row['confirmed_seeds'] or [])} seeds"
                if row.get("confirmed_seeds")
                else ""
            ),
        )
        header.add_row(
            "held-out",
            fmt(
                row["confirmed_heldout"] if row["confirmed_heldout"] is not None else row["heldout"]
            ),
        )
        origin = (
            "seed program"
            if row["is_seed"]
            else f"generation {row['generation']} · island {row['island']}"
        )
        header.add_row("origin", f"{origin} · {row['proposer'] or '—'} · {row['operator'] or '—'}")
        header.add_row("parents", ", ".join(row["parent_ids"] or []) or "—")
        header.add_row("children", ", ".join(children) or "—")
        header.add_row(
            "budget", f"{row['total_timesteps']} steps per env · eval key {row['eval_key']}"
        )
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
            table = Table(title="evaluations", title_justify="left", header_style="bold")
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
                    column, justify="left" if column in ("purpose", "env", "stage") else "right"
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
                        fmt(ev["normalised"]),
                        fmt(ev["baseline_mean"], 1),
                        fmt(ev["random_mean"], 1),
                        fmt_seconds(ev["compile_s"]),
                        fmt_seconds(ev["run_s"]),
                    )
                )
            console.print(table)
        for i, call in enumerate(calls, 1):
            meta = (
                f"model {call['model']} · tokens "
                f"{call['prompt_tokens']}+{call['completion_tokens']}"
                f" · cost {fmt_cost(call['cost_usd'])} · latency {fmt(call['latency_s'], 1)}s"
            )
            if call.get("error"):
                meta += f" · error: {call['error']}"
            limit = None if full else 1200
            prompt = "\n\n".join(
                f"[{m.get('role')}]\n{m.get('content')}" for m in (call["prompt"] or [])
            )
            reply = call.get("reply") or ""
            if limit:
                prompt = prompt if len(prompt) <= limit else "… " + prompt[-limit:]
                reply = reply if len(reply) <= limit else reply[:limit] + " …"
            console.print(Panel(Text(meta), title=f"LLM call {i}/{len(calls)}", title_align="left"))
            console.print(
                Panel(
                    Text(prompt),
                    title="prompt" + ("" if full else " (end; --full for all)"),
                    title_align="left",
                    style="dim",
                )
            )
            console.print(Panel(Text(reply), title="reply", title_align="left"))

    @app.command("lineage")
    @handles_user_errors
    def lineage_command(
        candidate: str = typer.Argument(
            ..., help="Candidate id (e.g. r1-7) or a prefix of its source hash."
        ),
        archive: str = typer.Option(
            "metarl.db", "--archive", envvar="METARL_ARCHIVE", help=ARCHIVE_HELP
        ),
        depth: int = typer.Option(30, "--depth", help="Generations of ancestors to show."),
    ) -> None:
        """The ancestry tree of a candidate, back to the seeds.

        Example:

          metarl lineage r1-12
        """
        # lazy: keeps `metarl --help` and the archive commands fast (no jax import)
        from metarl.archives.queries import lineage

        with _open(archive) as store:
            cid = store.resolve_candidate(candidate)
            root = lineage(store, cid, max_depth=depth)
        tree = Tree(_node_label(root))

        def grow(branch: Tree, node: dict) -> None:
            for parent in node["parents"]:
                grow(branch.add(_node_label(parent)), parent)

        grow(tree, root)
        console.print(tree)

    @app.command("runs")
    @handles_user_errors
    def runs_command(
        archive: str = typer.Option(
            "metarl.db", "--archive", envvar="METARL_ARCHIVE", help=ARCHIVE_HELP
        ),
    ) -> None:
        """List the archive's runs with status, progress and best fitness.

        Example:

          metarl runs --archive results/metarl.db
        """
        with _open(archive) as store:
            runs = store.runs()
        if not runs:
            console.print(f"no runs in {archive}")
            return
        table = Table(title=f"runs in {archive}", title_justify="left", header_style="bold")
        for column in (
            "run",
            "status",
            "task",
            "suite",
            "proposer",
            "candidates",
            "gen",
            "best",
            "fitness",
            "time",
            "cost",
            "started",
        ):
            table.add_column(
                column,
                justify="right"
                if column in ("candidates", "gen", "fitness", "time", "cost")
                else "left",
            )
        styles = {
            "finished": "green",
            "running": "cyan",
            "stopped": "yellow",
            "interrupted": "yellow",
            "killed": "red",
            "failed": "red",
        }
        for run in runs:
            status = Text(run["shown_status"], style=styles.get(run["shown_status"], ""))
            if run.get("stop_reason") and run["shown_status"] != "finished":
                status.append(f" ({run['stop_reason']})", style="dim")
            table.add_row(
                *_plain(
                    run["id"],
                    status,
                    run["task"],
                    run["suite"],
                    run["proposer"] or "—",
                    f"{run['candidates_count'] or 0}/{run['budget_candidates']}",
                    str(run["generation"] or 0),
                    run["best_id"] or "—",
                    fmt(run["best_fitness"]),
                    fmt_seconds(run["elapsed_s"]),
                    f"${run['cost_usd']:.3f}" if run.get("cost_usd") else "—",
                    (run["started_at"] or "")[:19],
                )
            )
        console.print(table)

    @app.command("export")
    @handles_user_errors
    def export_command(
        run: str = typer.Argument(..., help="The run to export, e.g. r1."),
        fmt_name: str = typer.Option(
            "json", "--format", "-f", help="json (everything) or csv (one row per candidate)."
        ),
        output: Optional[Path] = typer.Option(
            None, "--output", "-o", help="File to write (default: stdout)."
        ),
        archive: str = typer.Option(
            "metarl.db", "--archive", envvar="METARL_ARCHIVE", help=ARCHIVE_HELP
        ),
    ) -> None:
        """Export a run: JSON with the run, candidates, evaluations, calls and messages; or CSV.

        Examples:

          metarl export r1 --format csv -o r1.csv

          metarl export r1 > r1.json
        """
        # lazy: keeps `metarl --help` and the archive commands fast (no jax import)
        from metarl.archives.queries import export_csv, export_json

        if fmt_name not in ("json", "csv"):
            raise user_error(f"unknown format {fmt_name!r}; choose json or csv")
        if output is not None and not output.parent.exists():
            raise user_error(f"cannot write {output}: folder {output.parent} does not exist")
        with _open(archive) as store:
            text = export_json(store, run) if fmt_name == "json" else export_csv(store, run)
        if output is None:
            typer.echo(text, nl=False)
        else:
            output.write_text(text)
            console.print(f"wrote {output} ({len(text)} bytes)")
