"""`metarl export CANDIDATE --format discogen -o DIR`: a candidate as a DiscoGen task directory
(metarl/discogen/task.py), scored in metarl's sandbox by `metarl evaluate --harness discogen`.

DiscoGen's own `run_main.py` imports the candidate in a plain process, so the export is guarded
as an evaluation is: a candidate metarl's static check refuses is not exported (one line,
before DiscoGen's runtime is looked up), unless `--unsafe-export-refused` asks for it, loudly.

DiscoGen runs in its own interpreter (Python >= 3.12; metarl/discogen/runtime.py), so nothing
here imports it; without one, the command says how to get one, in one line.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from pathlib import Path

from rich.table import Table
from rich.text import Text

from metarl.cli.console import console, say
from metarl.cli.errors import UserError
from metarl.cli.options import DEFAULT_ARCHIVE, parse_envs
from metarl.evaluation.static_check import MAX_SOURCE_BYTES
from metarl.tasks import task_names

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
    unsafe_export_refused: bool = False,
) -> None:
    """Write the DiscoGen task of `target` (an archived candidate id or hash prefix, or a
    candidate file) to `output`; see `metarl export --help`.

    The static check runs before DiscoGen's runtime is looked up, so a refused candidate is
    refused in one line on any machine, and nothing is written.

    Raises:
        RefusedExport: metarl's static check refuses the candidate (no --unsafe-export-refused).
        UserError: a bad option, target or archive.
    """
    # lazy: the exporter imports the task layer (jax); `metarl --help` stays fast
    from metarl.discogen.guard import check_exportable
    from metarl.discogen.runtime import find_runtime
    from metarl.discogen.task import export_task

    overrides = parse_settings(settings)
    if output is None:
        raise UserError("--format discogen needs --output DIR (the task directory to create)")
    env_list = parse_envs(envs)
    source, task, candidate_id = _candidate(target, archive, task)
    name = candidate_id or target
    refused = check_exportable(source, task, name=name, unsafe=unsafe_export_refused)
    runtime = find_runtime(discogen_python)
    manifest = export_task(
        source,
        task,
        output,
        runtime,
        test=test,
        envs=tuple(env_list) if env_list else None,
        config=overrides,
        candidate_id=candidate_id,
        unsafe_export_refused=unsafe_export_refused,
    )
    if refused is not None:
        _warn_refused(name, refused, manifest.module, output)
        command = None  # metarl's harness refuses it too: no command scores it
    else:
        file_task = task if candidate_id is None else None
        archived_in = archive if candidate_id is not None else None
        command = sandboxed_command(
            target, file_task, test, env_list, settings, discogen_python, archived_in
        )
    wrote = (
        f"wrote DiscoGen's {manifest.side} task ({', '.join(manifest.envs)}) with the candidate "
        f"as {manifest.module}.py to {output}"
    )
    say(f"{wrote}; score it in metarl's sandbox: {command}" if command else wrote)


def _warn_refused(name: str, reason: str, module: str, output: Path) -> None:
    """The loud line an export of a refused candidate (`--unsafe-export-refused`) prints on
    stderr: DiscoGen's `run_main.py` would import its module unsandboxed.

    Args:
        name: the candidate's id or file.
        reason: the static check's reason (inert, check_exportable's).
        module: the DiscoGen module written ("loss" or "optim").
        output: the task directory.
    """
    say(
        f"warning: {name} was refused by the static check ({reason}); its {module}.py runs "
        f"code metarl never lets run: run {output} only inside a sandbox, never with a plain "
        "`python run_main.py`",
        err=True,
        style="bold red",
    )


def sandboxed_command(
    target: str,
    task: str | None,
    test: bool,
    envs: list[str] | None,
    settings: list[str] | None,
    discogen_python: str | None,
    archive: str | None,
) -> str:
    """The `metarl evaluate ... --harness discogen` that scores an exported candidate as its
    task directory was built, inside metarl's sandbox (never a plain `python run_main.py`,
    which would import the candidate unsandboxed on this machine).

    Args:
        target: the candidate as given (a file or an archived id).
        task: `--task` for a file target; None for an archived candidate (the archive knows).
        test: DiscoGen's test side.
        envs: the games, when chosen.
        settings: the `--set KEY=VALUE` items, as given.
        discogen_python: the runtime's `--discogen-python`, when given.
        archive: the archive of an archived candidate (named only when not the default).

    Returns:
        One shell command line, every argument quoted for the shell.
    """
    words = ["metarl", "evaluate", target, "--harness", "discogen"]
    if task is not None:
        words += ["--task", task]
    if test:
        words.append("--test")
    if envs:
        words += ["--envs", ",".join(envs)]
    for item in settings or []:
        words += ["--set", item]
    if discogen_python:
        words += ["--discogen-python", discogen_python]
    if archive is not None and archive != DEFAULT_ARCHIVE:
        words += ["--archive", archive]
    return shlex.join(words)


def _candidate(target: str, archive: str, task: str | None) -> tuple[str, str, str | None]:
    """(source, task, candidate id or None) of a candidate file or an archived candidate."""
    path = Path(target)
    if path.suffix == ".py" or path.exists():
        if not path.is_file():
            raise UserError(f"no such file: {path}")
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise UserError(f"cannot read {path}: {error}") from None
        task = task or defined_task(source)
        if task is None:
            raise UserError(f"--task drift or --task optimizer: which contract {path} implements")
        return source, task, None
    if not Path(archive).exists():
        raise UserError(f"no such file: {target} (and no archive at {archive} to look it up in)")
    # lazy: sqlite_utils
    from metarl.archives.store import Archive

    with Archive(archive, must_exist=True) as store:
        candidate_id = store.resolve_candidate(target)
        row = store.candidate(candidate_id)
    if task is not None and task != row["task"]:
        raise UserError(f"{candidate_id} is a {row['task']} candidate, not {task}")
    return row["code"], row["task"], candidate_id


def defined_task(source: str) -> str | None:
    """The task a candidate file is for, read from its syntax (never executed): the one
    registered task whose function the file defines at its top level.

    Args:
        source: the file's text (untrusted).

    Returns:
        The task's name, or None when the file does not parse, is over the static check's size
        limit, or defines no registered task's function or more than one.
    """
    if len(source.encode("utf-8", "surrogatepass")) > MAX_SOURCE_BYTES:
        return None  # the static check refuses it anyway; never parse an oversized file
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # no task to infer: the caller asks for --task
    registered = set(task_names())
    defined = {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name in registered
    }
    return defined.pop() if len(defined) == 1 else None


def evaluate_discogen(
    targets: list[str],
    task: str | None,
    test: bool,
    envs: list[str] | None,
    discogen_python: str | None,
    settings: list[str] | None,
    limits,
    as_json: bool,
    archive_path: str,
    record: bool = True,
) -> bool:
    """`metarl evaluate TARGET --harness discogen`: each candidate (a file, or an archived
    candidate id) in DiscoGen's harness (metarl/discogen/harness.py), printed as a table or
    JSON and (when `record`) archived in `archive_path` as an external evaluation beside ours;
    True when all passed."""
    from metarl.discogen.harness import DiscoGenHarness  # lazy: the task layer (jax)
    from metarl.discogen.modules import MODULE_OF_TASK  # lazy: with the harness
    from metarl.discogen.runtime import find_runtime  # lazy: with the harness

    overrides = parse_settings(settings)
    candidates = [_candidate(target, archive_path, task) for target in targets]
    for target, (_, kind, _) in zip(targets, candidates):
        if kind not in MODULE_OF_TASK:
            raise UserError(
                f"{target}: --harness discogen scores {' and '.join(MODULE_OF_TASK)}, not {kind!r}"
            )
    runtime = find_runtime(discogen_python)
    harness = DiscoGenHarness(
        runtime, test=test, envs=tuple(envs) if envs else None, config=overrides, limits=limits
    )
    outcomes = [harness.evaluate(source, kind) for source, kind, _ in candidates]
    archived = (
        _archive_outcomes(archive_path, candidates, outcomes, runtime.discogen)
        if record
        else [None] * len(outcomes)
    )
    if as_json:
        rows = [
            {"target": t, "candidate_id": c[2], "archived": a, **o.to_dict()}
            for t, c, o, a in zip(targets, candidates, outcomes, archived)
        ]
        print(json.dumps(rows[0] if len(rows) == 1 else rows))
        return all(o.passed for o in outcomes)
    for target, (_, kind, _), outcome, row_id in zip(targets, candidates, outcomes, archived):
        _print_outcome(target, kind, outcome, runtime.discogen)
        if row_id is not None:
            say(f"archived as external evaluation {row_id} in {archive_path}", style="dim")
    return all(o.passed for o in outcomes)


def _archive_outcomes(
    archive_path: str, candidates: list[tuple[str, str, str | None]], outcomes: list, release: str
) -> list[str]:
    """Record each outcome as an external evaluation in the archive; their row ids."""
    # lazy: sqlite_utils and the task layer
    from metarl.archives.external import ExternalEvaluation, record_external
    from metarl.archives.store import Archive
    from metarl.platform import library_versions
    from metarl.tasks.candidate import source_hash

    versions = library_versions()
    ids = []
    with Archive(archive_path) as store:
        for (source, kind, candidate_id), outcome in zip(candidates, outcomes):
            evaluation = ExternalEvaluation(
                hash=source_hash(source),
                task=kind,
                harness="discogen",
                release=release,
                side=outcome.protocol.get("side", "train"),
                protocol=outcome.protocol,
                passed=outcome.passed,
                stage=outcome.stage,
                reason=outcome.reason,
                fitness=outcome.fitness,
                games=outcome.games,
                candidate_id=candidate_id,
                seconds=outcome.seconds,
                isolation=outcome.isolation,
                versions=versions,
            )
            ids.append(record_external(store, evaluation))
    return ids


def _print_outcome(target: str, task: str, outcome, release: str) -> None:
    """One candidate's outcome in DiscoGen's harness: its per-game table or why it failed."""
    side = outcome.protocol.get("side", "train")
    name = Path(target).name if Path(target).suffix == ".py" else target
    title = f"{name} · task {task} · DiscoGen {release} harness, {side} side"
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
