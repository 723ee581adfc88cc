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
from metarl.cli.options import parse_envs

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
    env_list = parse_envs(envs)
    source, task, candidate_id = _candidate(target, archive, task)
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
