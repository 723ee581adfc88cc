"""`metarl export CANDIDATE --format discogen -o DIR`: a candidate as a DiscoGen task directory
(metarl/discogen/task.py), runnable with DiscoGen's own `run_main.py`.

DiscoGen runs in its own interpreter (Python >= 3.12; metarl/discogen/runtime.py), so nothing
here imports it; without one, the command says how to get one, in one line.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from rich.table import Table
from rich.text import Text

from metarl.cli.console import console, say
from metarl.cli.errors import UserError

# DiscoGen's config keys are upper-case identifiers (`TOTAL_TIMESTEPS`, `NUM_ENVS`)
_KEY = re.compile(r"[A-Z][A-Z0-9_]*")


def parse_settings(items: list[str] | None) -> dict:
    """`--set KEY=VALUE` items as a dict of Python literals (`TOTAL_TIMESTEPS=1e5` -> 100000.0; a
    bare word is a string).

    Raises:
        UserError: an item that is not KEY=VALUE with an upper-case key and a literal value.
    """
    out = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not _KEY.fullmatch(key):
            raise UserError(f"--set {item!r}: give KEY=VALUE with DiscoGen's upper-case key")
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            value = text.strip()  # a bare word: a string (ACTIVATION=tanh)
        if not isinstance(value, (int, float, bool, str)):
            raise UserError(f"--set {item!r}: the value must be a number, True/False or a string")
        out[key] = value
    return out


def export_discogen(
    target: str,
    output: Path | None,
    archive: str,
    task: str | None,
    test: bool,
    envs: str | None,
    discogen_python: str | None,
    settings: list[str] | None,
) -> None:
    """Write the DiscoGen task of `target` (an archived candidate id or hash prefix, or a
    candidate file with `--task`) to `output`; see `metarl export --help`."""
    # lazy: the exporter imports the task layer (jax); `metarl --help` stays fast
    from metarl.discogen.runtime import find_runtime
    from metarl.discogen.task import export_task

    overrides = parse_settings(settings)
    if output is None:
        raise UserError("--format discogen needs --output DIR (the task directory to create)")
    env_list = tuple(e.strip() for e in envs.split(",") if e.strip()) if envs else None
    source, task, candidate_id = _candidate(target, archive, task)
    runtime = find_runtime(discogen_python)
    manifest = export_task(
        source,
        task,
        output,
        runtime,
        test=test,
        envs=env_list,
        config=overrides,
        candidate_id=candidate_id,
    )
    say(
        f"wrote DiscoGen's {manifest.side} task ({', '.join(manifest.envs)}) with the candidate "
        f"as {manifest.module}.py to {output}; run it: cd {output} && "
        f"{runtime.python} run_main.py"
    )


def _candidate(target: str, archive: str, task: str | None) -> tuple[str, str, str | None]:
    """(source, task, candidate id or None) of a candidate file or an archived candidate."""
    path = Path(target)
    if path.suffix == ".py" or path.exists():
        if not path.is_file():
            raise UserError(f"no such file: {path}")
        if task is None:
            raise UserError(f"--task drift or --task optimizer: which contract {path} implements")
        try:
            return path.read_text(encoding="utf-8"), task, None
        except (OSError, UnicodeDecodeError) as error:
            raise UserError(f"cannot read {path}: {error}") from None
    # lazy: sqlite_utils
    from metarl.archives.store import Archive

    with Archive(archive, must_exist=True) as store:
        candidate_id = store.resolve_candidate(target)
        row = store.candidate(candidate_id)
    if task is not None and task != row["task"]:
        raise UserError(f"{candidate_id} is a {row['task']} candidate, not {task}")
    return row["code"], row["task"], candidate_id


def evaluate_discogen(
    paths: list[Path],
    sources: list[str],
    task: str,
    test: bool,
    envs: list[str] | None,
    discogen_python: str | None,
    settings: list[str] | None,
    limits,
    as_json: bool,
) -> bool:
    """`metarl evaluate FILE --harness discogen`: each candidate in DiscoGen's harness
    (metarl/discogen/harness.py), printed as a table or JSON; True when all passed."""
    from metarl.discogen.harness import DiscoGenHarness  # lazy: the task layer (jax)
    from metarl.discogen.runtime import find_runtime  # lazy: with the harness

    overrides = parse_settings(settings)
    runtime = find_runtime(discogen_python)
    harness = DiscoGenHarness(
        runtime, test=test, envs=tuple(envs) if envs else None, config=overrides, limits=limits
    )
    outcomes = [harness.evaluate(source, task) for source in sources]
    if as_json:
        rows = [{"path": str(p), **o.to_dict()} for p, o in zip(paths, outcomes)]
        print(json.dumps(rows[0] if len(rows) == 1 else rows))
        return all(o.passed for o in outcomes)
    for path, outcome in zip(paths, outcomes):
        side = outcome.protocol.get("side", "train")
        title = f"{path.name} · task {task} · DiscoGen {runtime.discogen} harness, {side} side"
        if outcome.passed:
            table = Table(title=title)
            for column in ("game", "return", "base return", "normalised"):
                table.add_column(column, justify="left" if column == "game" else "right")
            for game in outcome.games:
                table.add_row(
                    game.env,
                    f"{game.candidate:.3f} ± {game.candidate_std:.3f}",
                    f"{game.base:.3f} ± {game.base_std:.3f}",
                    "—" if game.normalised is None else f"{game.normalised:.3f}",
                )
            console.print(table)
            fitness = "—" if outcome.fitness is None else f"{outcome.fitness:.3f}"
            say(f"PASSED · fitness {fitness} (candidate / DiscoGen's base, mean over games)")
        else:
            console.print(Text(f"{title}: FAILED at {outcome.stage}: {outcome.reason}"))
        say(
            f"protocol: {outcome.protocol.get('seeds', 8)} seeds x 10 rates, greedy evaluation "
            f"over 16 episodes, DiscoGen's fixed seeds; config {outcome.protocol.get('config')}; "
            f"{outcome.isolation or 'not run'}, {outcome.seconds:.0f} s",
            style="dim",
        )
    return all(o.passed for o in outcomes)
