"""`metarl export CANDIDATE --format discogen -o DIR`: a candidate as a DiscoGen task directory
(metarl/discogen/task.py), runnable with DiscoGen's own `run_main.py`.

DiscoGen runs in its own interpreter (Python >= 3.12; metarl/discogen/runtime.py), so nothing
here imports it; without one, the command says how to get one, in one line.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from metarl.cli.console import say
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
