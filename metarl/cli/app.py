"""The Typer application: the `metarl` group, its root options, and every command.

The commands are plain functions in `evaluate`, `discover` and `archive` (importable and
testable on their own); they are registered here, so those modules never import this one.
Their modules import nothing heavy at the top (no jax, no archive), which keeps `metarl --help`
fast; each command imports what it needs when it runs.
"""

from __future__ import annotations

import typer

import metarl
from metarl.cli import archive, discover, discover_options, evaluate, export, grpo, methods, report
from metarl.cli.errors import Group
from metarl.evaluation.text import printable
from metarl.logs import log_to_stderr, scrub_records_with

app = typer.Typer(
    name="metarl",
    cls=Group,
    help="Discover reinforcement-learning algorithm components with language models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"metarl {metarl.__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """metarl: an evolutionary loop in which an LLM (or an offline mutation operator) writes RL
    algorithm components, each scored by training PPO agents on gymnax environments."""
    # log records quote candidate and model text and the run's options: escapes made visible,
    # URL credentials redacted, in every handler (stderr, a run's log file)
    scrub_records_with(printable)
    log_to_stderr(verbose=False)  # warnings and errors; `--verbose` commands add INFO


app.command("evaluate")(evaluate.evaluate)
app.command("discover", cls=discover_options.DiscoverCommand)(discover.discover)
app.command("resume")(discover.resume)
app.command("es")(methods.es)
app.command("distil")(methods.distil)
app.command("symbolic")(methods.symbolic)
app.command("train-proposer")(grpo.train_proposer)
app.command("eval-proposer")(grpo.eval_proposer)
app.command("leaderboard")(archive.leaderboard)
app.command("show")(archive.show)
app.command("lineage")(archive.lineage)
app.command("runs")(archive.runs)
app.command("export")(export.export)  # json/csv (archive.export) and trl datasets
app.command("report")(report.report)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
