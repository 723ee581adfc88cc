"""A candidate as a DiscoGen task directory: DiscoGen's own `OnPolicyRL` task, built by
DiscoGen's `create_task` in its runtime, with the candidate's module in `discovered/`.

The directory is what DiscoGen hands an algorithm-discovery agent: one folder per environment
(`MinAtar/Breakout/main.py`, its `config.py`, the fixed modules) whose editable module is a
link to `discovered/loss.py` (or `optim.py`), and DiscoGen's `run_main.py`, which runs every
`main.py` and prints their JSON. `python run_main.py` in it (with DiscoGen's runtime) scores
the candidate by DiscoGen's protocol: 8 seeds x 10 learning rates (1x..10x the config's `LR`),
the mean return of the last 5% of training per rate, greedy evaluation over 16 episodes at
each rate, and the best rate's mean.

Train and test: by default the task is DiscoGen's training side (Breakout, Freeway); `test`
builds its test side (Asterix, SpaceInvaders) around the same `discovered/` module, as
DiscoGen does after a discovery run. `envs` picks other games (`Breakout-MinAtar` or
DiscoGen's `MinAtar/Breakout`). `config` overrides values of every environment's `config`
(e.g. `TOTAL_TIMESTEPS` for a CPU-scale run): appended to each `config.py` and recorded, with
the candidate's hash and the DiscoGen release, in `metarl.json` beside `run_main.py`.

`run_main.py` imports the candidate's module in a plain process, so a candidate must pass
metarl's static check to be exported (guard.py), before anything is written or DiscoGen's
runtime is started; `unsafe_export_refused` overrides that for research, and the manifest then
records the refusal.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from metarl.discogen.guard import check_exportable
from metarl.discogen.modules import module_name, module_source
from metarl.discogen.runtime import DiscoGenUnavailable, Runtime
from metarl.errors import USAGE, MetarlError
from metarl.tasks.candidate import source_hash

logger = logging.getLogger(__name__)

DOMAIN = "OnPolicyRL"
# DiscoBench's OnPolicyRL split (discogen/discobench_configs/OnPolicyRL_loss.yaml)
TRAIN_ENVS = ("MinAtar/Breakout", "MinAtar/Freeway")
TEST_ENVS = ("MinAtar/Asterix", "MinAtar/SpaceInvaders")
MANIFEST = "metarl.json"
BUILD_TIMEOUT_S = 300.0
_BUILD = """\
import json, sys
from discogen import create_task
spec = json.loads(sys.argv[1])
create_task("OnPolicyRL", test=spec["test"], config_dict=spec["config"], use_base=True,
            no_data=True)
"""


class ExportError(MetarlError, ValueError):
    """The task directory cannot be written (a bad destination or option); one line."""

    exit_code = USAGE


@dataclass(frozen=True)
class TaskManifest:
    """What `metarl.json` records about an exported task.

    Attributes:
        task: the metarl task of the candidate ("drift" or "optimizer").
        module: the DiscoGen module it is ("loss" or "optim").
        candidate_hash: the candidate's normalised source hash (metarl's `source_hash`), or
            None for DiscoGen's base module.
        candidate_id: the archived candidate it came from, or None (a file).
        side: "train" or "test" (DiscoGen's task sides).
        envs: the DiscoGen environment ids built.
        config: the overrides appended to each environment's config.py.
        discogen: the DiscoGen release that built it.
        refused: why metarl's static check refused the candidate, when it was exported anyway
            (`unsafe_export_refused`); None when it passed. Such a task must only be run in a
            sandbox.
    """

    task: str
    module: str
    candidate_hash: str | None
    candidate_id: str | None
    side: str
    envs: tuple[str, ...]
    config: dict
    discogen: str
    refused: str | None = None

    def to_dict(self) -> dict:
        return {**asdict(self), "envs": list(self.envs)}

    @classmethod
    def read(cls, root: Path) -> "TaskManifest":
        data = json.loads((root / MANIFEST).read_text())
        return cls(**{**data, "envs": tuple(data["envs"])})


def discogen_env(name: str) -> str:
    """DiscoGen's id of an environment: `Breakout-MinAtar` -> `MinAtar/Breakout`; an id
    already in DiscoGen's form (`MinAtar/Breakout`, `Brax/Ant`) is kept."""
    if "/" in name:
        return name
    if name.endswith("-MinAtar"):
        return f"MinAtar/{name[: -len('-MinAtar')]}"
    raise ExportError(
        f"no DiscoGen environment for {name!r}: give a MinAtar game (Breakout-MinAtar) or "
        "DiscoGen's id (MinAtar/Breakout)"
    )


def export_task(
    source: str | None,
    task: str,
    destination: Path,
    runtime: Runtime,
    *,
    test: bool = False,
    envs: tuple[str, ...] | None = None,
    config: dict | None = None,
    candidate_id: str | None = None,
    unsafe_export_refused: bool = False,
) -> TaskManifest:
    """Write the DiscoGen task directory whose editable module is `source`.

    Args:
        source: the candidate's program; None: DiscoGen's own base module for `task` (the
            baseline a candidate is normalised against, PPO's loss or Adam).
        task: its metarl task ("drift" or "optimizer").
        destination: the directory to create (must not exist, or be empty).
        runtime: the interpreter with DiscoGen (runtime.find_runtime).
        test: build DiscoGen's test side instead of its training side.
        envs: environments instead of the side's own (names as `discogen_env` reads them).
        config: values that replace those of every environment's config.
        candidate_id: the archived candidate, recorded in the manifest.
        unsafe_export_refused: export a candidate that metarl's static check refuses (for
            research on refused code; the task must then only be run in a sandbox). The refusal
            is recorded in the manifest.

    Returns:
        The manifest written to `destination/metarl.json`.

    Raises:
        RefusedExport: metarl's static check refuses `source` (checked before anything is
            written or started), and `unsafe_export_refused` is not set.
        ExportError: the destination is not an empty or new directory, or an env is unknown.
        NotExportable: DiscoGen has no module for `task`.
        DiscoGenUnavailable: DiscoGen failed to build the task.
    """
    module = module_name(task)
    refused = check_exportable(source, task, name=candidate_id, unsafe=unsafe_export_refused)
    text = None if source is None else module_source(source, task)
    destination = Path(destination)
    if destination.exists() and (not destination.is_dir() or any(destination.iterdir())):
        raise ExportError(f"{destination} exists and is not an empty folder")
    if not destination.parent.is_dir():
        raise ExportError(f"cannot write {destination}: folder {destination.parent} does not exist")
    side_envs = tuple(discogen_env(env) for env in envs) if envs else None
    train_envs = side_envs if side_envs and not test else TRAIN_ENVS
    test_envs = side_envs if side_envs and test else TEST_ENVS
    overrides = dict(config or {})
    # DiscoGen's training build deletes its source folder: build in a private one, then move
    staging = Path(tempfile.mkdtemp(prefix=".discogen-", dir=destination.parent))
    try:
        spec = {
            "train_task_id": list(train_envs),
            "test_task_id": list(test_envs),
            "source_path": "task",
            "template_backend": "default",
            **{f"change_{name}": name == module for name in _MODULES},
        }
        _build(runtime, staging, spec, test=False)
        if text is not None:  # else DiscoGen's base module stays (use_base)
            (staging / "task" / "discovered" / f"{module}.py").write_text(text)
        if test:
            _build(runtime, staging, spec, test=True)
        root = staging / "task"
        built = _env_dirs(root)
        for env_dir in built:
            _override(env_dir / "config.py", overrides)
        manifest = TaskManifest(
            task=task,
            module=module,
            candidate_hash=None if source is None else source_hash(source),
            candidate_id=candidate_id,
            side="test" if test else "train",
            envs=test_envs if test else train_envs,
            config=overrides,
            discogen=runtime.discogen,
            refused=refused,
        )
        (root / MANIFEST).write_text(json.dumps(manifest.to_dict(), indent=2) + "\n")
        if destination.exists():
            destination.rmdir()
        os.replace(root, destination)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    logger.info("exported %s candidate %s to %s", task, manifest.candidate_hash, destination)
    return manifest


# DiscoGen's editable OnPolicyRL modules (domains/OnPolicyRL/utils/task_spec.yaml)
_MODULES = ("loss", "networks", "optim", "train", "activation", "targets", "schedule")


def _build(runtime: Runtime, where: Path, spec: dict, test: bool) -> None:
    """Run DiscoGen's `create_task` for one side of the task in `where`."""
    argument = json.dumps({"test": test, "config": spec})
    try:
        done = subprocess.run(
            [runtime.python, "-c", _BUILD, argument],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise DiscoGenUnavailable(f"DiscoGen's create_task did not finish: {error}") from None
    if done.returncode != 0:
        logger.error("create_task failed:\n%s", done.stderr[-4000:])
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise DiscoGenUnavailable(f"DiscoGen's create_task failed: {last}")


def _env_dirs(root: Path) -> list[Path]:
    """The environment folders of a task directory (those with a `main.py`)."""
    return sorted(path.parent for path in root.rglob("main.py") if path.parent != root)


def _override(config_file: Path, overrides: dict) -> None:
    """Append `config.update(overrides)` to an environment's config.py (recorded)."""
    if not overrides:
        return
    values = repr(dict(sorted(overrides.items())))
    with config_file.open("a") as handle:
        handle.write(f"\n# metarl export: values replaced for this run\nconfig.update({values})\n")
