"""A candidate scored by DiscoGen's own harness, inside metarl's sandbox and limits.

`metarl evaluate FILE --harness discogen` writes the candidate's DiscoGen task (task.py) and
DiscoGen's base task at the same settings (the base once per harness), runs `run_main.py` in
each with DiscoGen's interpreter under `run_sandboxed` (evaluation/external.py: bubblewrap,
the stage's wall clock, memory, CPU and output limits), and reads the JSON line DiscoGen
prints. Each game's score is
the candidate's return over the base's, both by DiscoGen's protocol (8 seeds, 10 learning
rates, greedy evaluation over 16 episodes, the best rate's mean; MinAtar returns start at 0,
the random reference). The fitness is the mean over games.

The candidate passes metarl's static check first, as in metarl's own cascade: DiscoGen would
import any code, and the sandbox is the second line, not the first. A base run that fails is
the evaluator's fault (`HarnessFault`), never the candidate's. DiscoGen fixes its seeds
(`PRNGKey(30)` in its `main.py`), so its score can be known before it is measured: it is an
external, labelled number beside metarl's, never a selection signal.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from metarl.archives.external import ExternalGame
from metarl.discogen.runtime import Runtime
from metarl.discogen.task import TaskManifest, export_task
from metarl.errors import MetarlError
from metarl.evaluation.external import ExternalRun, run_sandboxed
from metarl.evaluation.settings import SandboxLimits
from metarl.evaluation.static_check import check_task_source
from metarl.evaluation.text import clean
from metarl.rl.scoring import normalised_score
from metarl.tasks import get_task

logger = logging.getLogger(__name__)

# DiscoGen 1.3.0's scoring protocol (domains/OnPolicyRL/templates/default/main.py)
PROTOCOL = {
    "harness": "discogen",
    "seeds": 8,
    "learning_rates": "10, linearly spaced from the config's LR to 10x",
    "episodes": 16,
    "score": "the best rate's mean greedy-evaluation return",
    "seed": "fixed: PRNGKey(30) for training, PRNGKey(42) for evaluation",
}


class HarnessFault(MetarlError, RuntimeError):
    """DiscoGen's own base task failed here: the evaluator's fault, not the candidate's."""


# One game in DiscoGen's harness: the archive's record of an external game (env, the candidate's
# and the base module's return mean and std on DiscoGen's seeds, their ratio), used as it is so
# an outcome is archived without a copy.
GameScore = ExternalGame


@dataclass(frozen=True)
class HarnessOutcome:
    """How a candidate did in DiscoGen's harness.

    Attributes:
        passed: it passed the static check and DiscoGen scored every game.
        stage: where it stopped ("static", "harness") or "done".
        reason: why it stopped (inert text), None when it passed.
        games: the per-game scores (empty unless passed).
        fitness: the mean normalised score over the games, None unless passed.
        protocol: DiscoGen's release, side, games, config overrides and scoring protocol.
        isolation: how the harness ran ("bubblewrap").
        seconds: the candidate's harness run (the base's excluded).
        output: the tail of the candidate run's output (inert).
    """

    passed: bool
    stage: str
    reason: str | None
    games: tuple[GameScore, ...] = ()
    fitness: float | None = None
    protocol: dict = field(default_factory=dict)
    isolation: str = ""
    seconds: float = 0.0
    output: str = ""

    def to_dict(self) -> dict:
        return {**asdict(self), "games": [asdict(g) for g in self.games]}


class DiscoGenHarness:
    """DiscoGen's harness at one setting (side, games, config, limits): DiscoGen's base task
    is run once, on first use, and every candidate is scored against it.

    Args:
        runtime: the interpreter with DiscoGen (runtime.find_runtime).
        test: DiscoGen's test side instead of its training side.
        envs: other games (task.discogen_env names).
        config: values replacing every game's config values (a CPU-scale budget).
        limits: the sandbox's limits for each harness run (default: SandboxLimits()).
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        test: bool = False,
        envs: tuple[str, ...] | None = None,
        config: dict | None = None,
        limits: SandboxLimits | None = None,
    ):
        self.runtime = runtime
        self.options = {"test": test, "envs": envs, "config": config}
        self.limits = limits or SandboxLimits()
        self._base: dict[str, dict[str, tuple[float, float]]] = {}  # task -> env -> scores

    def base(self, task: str) -> dict[str, tuple[float, float]]:
        """DiscoGen's base module's (mean, std) return per game for `task`'s module.

        Raises:
            HarnessFault: DiscoGen's base task failed (the runtime or the sandbox).
        """
        if task not in self._base:
            with tempfile.TemporaryDirectory(prefix="metarl-discogen-") as scratch:
                root = Path(scratch) / "base"
                manifest = export_task(None, task, root, self.runtime, **self.options)
                scores, problem = _scores(self._run(root), manifest)
            if problem is not None:
                raise HarnessFault(f"DiscoGen's base task failed in the sandbox: {problem}")
            self._base[task] = scores
        return self._base[task]

    def evaluate(self, source: str, task: str) -> HarnessOutcome:
        """Score `source` (a `task` candidate) against DiscoGen's base.

        Returns:
            The outcome; a failing candidate is an outcome, never an exception.

        Raises:
            HarnessFault: DiscoGen's base task failed (not the candidate's fault).
            ExportError, NotExportable, DiscoGenUnavailable: the task cannot be built.
        """
        report = check_task_source(source, get_task(task))
        if not report.ok:
            return HarnessOutcome(False, "static", f"static check: {report.reason}")
        base = self.base(task)
        with tempfile.TemporaryDirectory(prefix="metarl-discogen-") as scratch:
            root = Path(scratch) / "candidate"
            manifest = export_task(source, task, root, self.runtime, **self.options)
            run = self._run(root)
        ours, problem = _scores(run, manifest)
        common = {
            "protocol": _protocol(manifest, self.runtime),
            "isolation": run.isolation,
            "seconds": run.seconds,
            "output": clean((run.stdout + run.stderr)[-2000:], 2000) or "",
        }
        if problem is not None:
            return HarnessOutcome(False, "harness", clean(problem, 600), **common)
        games = tuple(
            GameScore(
                env,
                ours[env][0],
                ours[env][1],
                base[env][0],
                base[env][1],
                _finite(normalised_score(ours[env][0], 0.0, base[env][0])),
            )
            for env in manifest.envs
        )
        defined = [g.normalised for g in games if g.normalised is not None]
        fitness = sum(defined) / len(defined) if len(defined) == len(games) else None
        logger.info("DiscoGen harness: %s, fitness %s", [asdict(g) for g in games], fitness)
        return HarnessOutcome(True, "done", None, games, fitness, **common)

    def _run(self, root: Path) -> ExternalRun:
        command = [self.runtime.python, "run_main.py"]
        return run_sandboxed(command, root, self.runtime.prefixes, self.limits)


def _protocol(manifest: TaskManifest, runtime: Runtime) -> dict:
    return {
        **PROTOCOL,
        "discogen": runtime.discogen,
        "side": manifest.side,
        "envs": list(manifest.envs),
        "config": manifest.config,
    }


def _scores(
    run: ExternalRun, manifest: TaskManifest
) -> tuple[dict[str, tuple[float, float]], str | None]:
    """({env: (return mean, std)}, None) from DiscoGen's JSON line, or ({}, why not)."""
    if run.stopped:
        return {}, f"stopped by the sandbox: {run.stopped}"
    if run.returncode != 0:
        return {}, f"run_main.py exited with status {run.returncode}: {_last_line(run.stderr)}"
    report = _report(run.stdout)
    if report is None:
        return {}, "DiscoGen printed no result"
    errors = report.get("errors") or {}
    if errors:
        where, text = next(iter(errors.items()))
        return {}, f"DiscoGen's run failed in {_env_of(where)}: {_last_line(str(text))}"
    results = {_env_of(where): value for where, value in (report.get("results") or {}).items()}
    scores = {}
    for env in manifest.envs:
        value = results.get(env)
        try:
            mean, std = float(value["return_mean"]), float(value["return_std"])
        except (TypeError, KeyError, ValueError):
            return {}, f"DiscoGen reported no return for {env}"
        if not (math.isfinite(mean) and math.isfinite(std)):
            return {}, f"DiscoGen reported a non-finite return for {env}: {mean}"
        scores[env] = (mean, std)
    return scores, None


def _report(stdout: str) -> dict | None:
    """run_main.py's own report: the last line holding {"results": ..., "errors": ...}."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and set(data) == {"results", "errors"}:
            return data
    return None


def _env_of(where: str) -> str:
    """`./MinAtar/Breakout` (run_main.py's folder key) -> `MinAtar/Breakout`."""
    return where.removeprefix("./").strip("/")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "no output")[:300]


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
