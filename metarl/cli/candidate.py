"""One candidate on the terminal: `metarl show` (header, failure reason, thought, code,
evaluations, LLM calls) and `metarl lineage` (its ancestry tree).

Nearly everything here is model or candidate text (name, thought, code, reason, prompts,
replies, LLM errors, a method's metadata): it reaches rich only as `console.untrusted` Text or
escaped code, never as markup, its control characters shown as visible escapes.
"""

from __future__ import annotations

from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from metarl.cli.board import fate_text
from metarl.cli.console import Grid, cells, console, untrusted
from metarl.cli.formats import fmt, fmt_cost, fmt_interval, fmt_seconds
from metarl.evaluation.text import printable

# how an evaluation's environment is marked by its role (training envs are unmarked)
ROLE_MARK = {"validation": " (validation)", "test": " (test)"}


def _env_label(ev: dict) -> str:
    """An evaluation's environment, marked by its role and, when swept, its learning rate."""
    label = ev["env"] + ROLE_MARK.get(ev.get("role") or ("test" if ev["heldout"] else ""), "")
    return label + (f" @ lr {ev['lr']:.3g}" if ev.get("lr") is not None else "")


PROMPT_CHARS = 1200  # of an LLM call's prompt and reply shown without `show --full`


def _row_interval(row: dict, score: str) -> list | None:
    """[low, high] from an archived row's `{score}_low`/`{score}_high`; None when absent."""
    low, high = row.get(f"{score}_low"), row.get(f"{score}_high")
    return [low, high] if low is not None and high is not None else None


def _candidate_header(cid: str, row: dict, children: list[str], log: str | None) -> Grid:
    # lazy: the archive imports sqlite_utils and jax; `metarl --help` stays fast
    from metarl.archives.queries import test_column

    header = Grid()
    header.add_row("candidate", f"{cid}  {row['name'] or ''}")
    header.add_row("run", f"{row['run_id']} · task {row['task']} · suite {row['suite']}")
    if log is not None:
        header.add_row("run log", log)
    header.add_row("fate", fate_text(row))
    header.add_row(
        "train",
        fmt_interval(row["fitness"], _row_interval(row, "fitness"))
        + (f" on seeds {row['seeds']}" if row.get("seeds") else "")
        + (" (pinned)" if (row.get("outcome") or {}).get("seeds_pinned") else "")
        + (
            " · confirmed "
            f"{fmt_interval(row['confirmed_fitness'], _row_interval(row, 'confirmed_fitness'))} on "
            f"{len(row['confirmed_seeds'] or [])} seeds"
            if row.get("confirmed_seeds")
            else ""
        ),
    )
    if row.get("validation") is not None:
        header.add_row(
            "validation",
            f"{fmt_interval(row['validation'], _row_interval(row, 'validation'))} (IQM) on "
            f"{len(row.get('validation_seeds') or [])} fresh seeds",
        )
    held, source = test_column(row)
    where = {"final": "fresh seeds, after selection", "selection": "its own seeds"}
    header.add_row(
        "test",
        fmt_interval(row[held], _row_interval(row, held)) + f" ({where.get(source, source)})"
        if held
        else "—",
    )
    if any(_row_interval(row, s) for s in ("fitness", "confirmed_fitness", held or "heldout")):
        header.add_row("", "[low, high]: 95% bootstrap interval over the seeds")
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
    header.add_row(
        "budget", f"{fmt(row['total_timesteps'])} steps per env · eval key {fmt(row['eval_key'])}"
    )
    header.add_row("hash", f"{row['hash'] or '—'} · fingerprint {row['fingerprint'] or '—'}")
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
            f"tokens {fmt(row['prompt_tokens'])}+{fmt(row['completion_tokens'])} · "
            f"cost {fmt_cost(row['cost_usd'])} · latency {fmt(row['latency_s'], 1)}s",
        )
    if row.get("warnings"):
        header.add_row("warnings", "; ".join(row["warnings"]))
    return header


def _adaptation_cell(curve, scratch=None) -> str:
    """A meta-RL evaluation's adaptation curve in one cell (`0.49 → 0.62 → 0.71`), with its
    from-scratch PPO reference when recorded (`0.50 → 0.69 (scratch 0.50 → 0.52)`); '' without
    a curve."""
    if not curve:
        return ""
    cell = " → ".join(fmt(v, 2) for v in curve)
    if scratch:
        cell += f" (scratch {' → '.join(fmt(v, 2) for v in scratch)})"
    return cell


def _evaluations_table(evaluations: list[dict]) -> Table:
    adaptive = any(ev.get("adaptation") for ev in evaluations)
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
        *(("adaptation",) if adaptive else ()),
    ):
        table.add_column(
            column,
            justify="left" if column in ("purpose", "env", "stage") else "right",
            no_wrap=column in ("purpose", "env", "return", "normalised", "adaptation"),
        )
    for ev in evaluations:
        env = _env_label(ev)
        table.add_row(
            *cells(
                ev["purpose"],
                env,
                ev["stage"],
                str(len(ev["seeds"] or [])),
                str(ev["total_timesteps"]),
                # meta-RL returns are per episode, often in [0, 1]: one decimal hides them
                f"{fmt(ev['mean'], 3 if adaptive else 1)} ± {fmt(ev['std'], 3 if adaptive else 1)}",
                fmt_interval(ev["normalised"], _row_interval(ev, "normalised"), 2)
                if _row_interval(ev, "normalised")
                else fmt(ev["normalised"]),
                fmt(ev["baseline_mean"], 1),
                fmt(ev["random_mean"], 1),
                fmt_seconds(ev["compile_s"]),
                fmt_seconds(ev["run_s"]),
                *((_adaptation_cell(ev.get("adaptation"), ev.get("scratch")),) if adaptive else ()),
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
        table.add_column(untrusted(column), justify="right" if column in labels else "left")
    for ev in shown:
        env = _env_label(ev)
        values = [ev["purpose"], env, ev["stage"], str(ev["total_timesteps"])]
        table.add_row(*cells(*values, *(fmt(ev["published"].get(label)) for label in labels)))
    return table


def external_table(external: list) -> Table:
    """Scores in other projects' harnesses (DiscoGen), one row per evaluation: never ours, so
    apart from the tables above and labelled with the harness, its side and its config."""
    table = Table(
        title="in other harnesses: candidate / the harness's base module, same seeds",
        title_justify="left",
        header_style="bold",
    )
    for column in ("id", "harness", "side", "config", "fitness", "games", "when"):
        table.add_column(column, justify="right" if column == "fitness" else "left")
    for ev in external:
        games = (
            ", ".join(f"{g.env.rpartition('/')[2]} {fmt(g.normalised)}" for g in ev.games)
            if ev.passed
            else f"failed at {ev.stage}: {ev.reason}"
        )
        config = ev.protocol.get("config") or "its own"
        table.add_row(
            *cells(
                ev.id,
                f"{ev.harness} {ev.release}",
                ev.side,
                str(config),
                fmt(ev.fitness),
                games,
                ev.created_at[:16].replace("T", " "),
            )
        )
    return table


def _print_call(index: int, count: int, call: dict, full: bool) -> None:
    meta = (
        f"model {call['model']} · tokens "
        f"{fmt(call['prompt_tokens'])}+{fmt(call['completion_tokens'])}"
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
    console.print(Panel(untrusted(meta), title=f"LLM call {index}/{count}", title_align="left"))
    console.print(
        Panel(
            untrusted(prompt),
            title="prompt" + ("" if full else " (end; --full for all)"),
            title_align="left",
            style="dim",
        )
    )
    console.print(Panel(untrusted(reply), title="reply", title_align="left"))


def print_candidate(
    cid: str,
    row: dict,
    evaluations: list[dict],
    calls: list[dict],
    children: list[str],
    *,
    full: bool,
    log: str | None = None,
    external: list | None = None,
) -> None:
    """`metarl show`: header, failure reason, thought, code, evaluations, its scores in other
    harnesses, LLM calls.

    Args:
        cid: the candidate's id; row: its archived row.
        evaluations, calls, children: its evaluations, LLM calls and children, as archived.
        full: show whole prompts and replies (else their ends, PROMPT_CHARS each).
        log: where its run's log is (None: not shown).
        external: its external evaluations (archives/external.py), oldest first.
    """
    header = _candidate_header(cid, row, children, log)
    console.print(Panel(header, title=untrusted(cid, "bold"), title_align="left"))
    if row.get("reason"):
        console.print(
            Panel(untrusted(row["reason"]), title="failure reason", title_align="left", style="red")
        )
    if row.get("thought"):
        console.print(Panel(untrusted(row["thought"]), title="thought", title_align="left"))
    if row.get("code"):
        console.print(
            Panel(
                # Syntax never parses markup; printable shows the code's control characters
                Syntax(printable(row["code"]), "python", line_numbers=True, theme="ansi_dark"),
                title="code",
                title_align="left",
            )
        )
    if evaluations:
        console.print(_evaluations_table(evaluations))
        published = _published_table(evaluations)
        if published is not None:
            console.print(published)
    if external:
        console.print(external_table(external))
    for index, call in enumerate(calls, 1):
        _print_call(index, len(calls), call, full)


def _node_label(node: dict) -> Text:
    text = untrusted(node["id"], "cyan")
    if node.get("missing"):
        text.append("  (not in this archive)", style="red")
        return text
    text.append_text(untrusted(f"  {node['name'] or '—'}", "bold"))
    if node["is_seed"]:
        text.append("  seed", style="dim")
    else:
        text.append_text(
            untrusted(f"  gen {node['generation']}  {node['operator'] or node['proposer']}", "dim")
        )
    if node["status"] == "passed":
        text.append(f"  fitness {fmt(node['fitness'])}", style="green")
        if node.get("confirmed") is not None:
            text.append(f" (confirmed {fmt(node['confirmed'])})", style="green")
    else:
        text.append_text(untrusted(f"  {node['status']} at {node['stage']}", "red"))
    if node.get("repeat"):
        text.append("  (ancestry shown above)", style="dim")
    return text


def lineage_tree(root: dict) -> Tree:
    """A `metarl.archives.queries.lineage` result as a tree, the candidate at its root.

    Args:
        root: the lineage node of the candidate, its `parents` nested.

    Returns:
        The tree; every label is safe to print.
    """
    tree = Tree(_node_label(root))

    def grow(branch: Tree, node: dict) -> None:
        for parent in node["parents"]:
            grow(branch.add(_node_label(parent)), parent)

    grow(tree, root)
    return tree
