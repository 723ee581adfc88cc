"""The tracer's stages: the only code of the cascade that runs candidate Python.

`trace_candidate` loads the candidate, runs the task's probes on it (detailed, friendly reasons
for the proposer) and exports it per element (rl/verifier/artifact.py); `sample_candidate`
gives a drift candidate's values and slopes on the distillation grid (rl/lpo.py) for
black-box distillation.
Both run in a *tracer*, a sandboxed process the candidate owns once its code runs, so the parent
treats what they return as untrusted data. Kept apart from the trainer's stages
(evaluation/stages.py), which never execute candidate Python.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from metarl.rl.lpo import drift_grid, sample_drift
from metarl.rl.verifier.artifact import ArtifactRejected, encode, export_variants, load_variants
from metarl.tasks import Task
from metarl.tasks.candidate import candidate_namespace
from metarl.tasks.probing import describe_exception, register_candidate_source


class StageFailure(Exception):
    """The candidate fails the current stage; `reason` is written for the proposer to read."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class TraceResult:
    """What the tracer returns: an encoded artifact, or why there is none."""

    ok: bool
    artifact: dict | None = None
    reason: str | None = None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        if self.ok:
            return {"ok": True, "artifact": self.artifact, "warnings": self.warnings}
        return {"ok": False, "reason": self.reason, "warnings": self.warnings}


# --- stage 2, untrusted half: the candidate's Python ---------------------------------------------
def load_candidate(source: str, function_name: str) -> Callable:
    """Execute the candidate module in the restricted namespace (plus `print`, captured).

    Raises:
        StageFailure: the module does not run or does not define `function_name`.
    """
    register_candidate_source(source)
    namespace = candidate_namespace()
    namespace["__builtins__"] = {**namespace["__builtins__"], "print": builtins.print}
    try:
        code = compile(source, "<candidate>", "exec")
        exec(code, namespace)  # noqa: S102 - restricted namespace, sandboxed tracer process
    except Exception as error:
        raise StageFailure(
            describe_exception(error, "defining the candidate (running the module's top level)")
        ) from error
    function = namespace.get(function_name)
    if not callable(function):
        raise StageFailure(f"the candidate does not define a function `{function_name}`")
    return function


def trace_candidate(task: Task, source: str, probe_seed: int, platform: str) -> TraceResult:
    """Load the candidate, run the task's probes on it, and export it per element.

    Args:
        task: the task whose contract the candidate implements.
        source: the candidate's source code (already through the static check).
        probe_seed: seeds the probes' random inputs.
        platform: the JAX platform the artifact is exported for ("cpu", "cuda").

    Returns:
        The encoded artifact with the probes' warnings, or the reason there is none.
    """
    warnings: list[str] = []
    try:
        function = load_candidate(source, task.function_name)
        report = task.probes(function, int(probe_seed))
        warnings.extend(report.warnings)
        if not report.ok:
            raise StageFailure(report.reason)
        try:
            blobs = export_variants(task.per_element(function), task.element_signature, platform)
        except Exception as error:
            raise StageFailure(
                describe_exception(
                    error,
                    f"exporting {task.function_name} for one element (scalar inputs; the "
                    "trainer applies it to every element)",
                )
            ) from error
        try:
            load_variants(blobs, task.element_signature, platform)
        except ArtifactRejected as error:
            raise StageFailure(f"the exported program was refused: {error}") from error
    except StageFailure as failure:
        return TraceResult(ok=False, reason=failure.reason, warnings=warnings)
    except MemoryError:
        return TraceResult(
            ok=False,
            reason="ran out of memory while probing the candidate (MemoryError); keep "
            "intermediate arrays the size of the inputs",
            warnings=warnings,
        )
    return TraceResult(ok=True, artifact=encode(blobs), warnings=warnings)


def _first_nonfinite(
    name: str, values: np.ndarray, ratio: np.ndarray, advantage: np.ndarray
) -> str | None:
    """Where `values` first stops being finite, as a one-line reason (None when all finite)."""
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size == 0:
        return None
    at = int(bad[0])
    return (
        f"non-finite {name} ({values[at]}) at ratio={float(ratio[at]):.4g}, "
        f"advantage={float(advantage[at]):.4g} ({bad.size} of {values.size} grid points); "
        "the drift and its slope must be finite for every ratio in [e^-2, e^2] and advantage "
        "in [-8, 8]"
    )


def sample_candidate(task: Task, source: str, points: int, epsilon: float) -> dict:
    """A drift candidate's values and slopes d drift / d ratio on the distillation grid.

    Runs candidate Python (in production only inside a sandboxed tracer): loads the candidate
    as `trace_candidate` does and samples it with `rl.lpo.sample_drift` on `drift_grid(points)`.

    Args:
        task: the task; only a distillable one (Task.distillable) can be sampled.
        source: the candidate's source code (already through the static check).
        points: grid points per axis (`points * points` samples).
        epsilon: the clip range passed to the drift.

    Returns:
        `{"ok": True, "value": [...], "slope": [...]}` (`points * points` floats each, in the
        grid's order) or `{"ok": False, "reason": "..."}` with a one-line reason.
    """
    if not task.distillable:
        return {"ok": False, "reason": f"the {task.name} task cannot be sampled (not distillable)"}
    grid = drift_grid(int(points))
    size = int(points) ** 2
    try:
        function = load_candidate(source, task.function_name)
        try:
            samples = sample_drift(function, grid, float(epsilon))
        except Exception as error:
            raise StageFailure(
                describe_exception(error, "sampling the drift and its slope on the grid")
            ) from error
        for name, values in (
            ("drift value", samples.value),
            ("slope d drift / d ratio", samples.slope),
        ):
            if values.shape != (size,):
                raise StageFailure(
                    f"the {name} has shape {values.shape} on {size} scalar grid points; "
                    "expected one scalar per (ratio, advantage) pair"
                )
            reason = _first_nonfinite(name, values, samples.ratio, samples.advantage)
            if reason:
                raise StageFailure(reason)
    except StageFailure as failure:
        return {"ok": False, "reason": " ".join(failure.reason.split())}
    except MemoryError:
        return {"ok": False, "reason": "ran out of memory while sampling the drift (MemoryError)"}
    return {"ok": True, "value": samples.value.tolist(), "slope": samples.slope.tolist()}
