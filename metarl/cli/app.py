"""The Typer application: registers each command group's module."""

from __future__ import annotations

import typer

import metarl

app = typer.Typer(
    name="metarl",
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


def _register() -> None:
    # Each command group module exposes `register(app)`; importing them lazily keeps
    # `metarl --help` fast (no jax import).
    import importlib

    for module in ("evaluate", "discover", "archive"):
        importlib.import_module(f"metarl.cli.{module}").register(app)


_register()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
