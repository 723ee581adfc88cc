"""What a sandboxed tracer sends back, read field by field: a traced artifact (or why there is
none) for the cascade's probes stage, and a drift candidate's values and slopes for
`Evaluator.sample`. The tracer ran candidate code, so nothing in its message is trusted: every
field's type, size and finiteness is checked here before the parent uses it.
"""

from __future__ import annotations

import numpy as np

from metarl.evaluation.sandbox import WorkerResult
from metarl.evaluation.text import clean


class SampleFailure(Exception):
    """A candidate could not be sampled on the distillation grid (`Evaluator.sample`).

    Attributes:
        stage: "static" (refused by the static check) or "sample" (in the sandboxed tracer).
        reason: one line, cleaned of control characters and secrets.
    """

    def __init__(self, stage: str, reason: str):
        self.stage = stage
        self.reason = " ".join(clean(str(reason), 1000).split())
        super().__init__(f"{stage}: {self.reason}")


def read_trace(run: WorkerResult) -> tuple[object, list[str], str | None]:
    """(artifact, warnings, failure reason) from the tracer; every field checked."""
    if run.status != "ok":
        return None, [], run.reason or f"the tracer stopped ({run.status})"
    payload = run.result.get("payload")
    if run.result.get("kind") != "trace" or not isinstance(payload, dict):
        if run.result.get("kind") == "error" and isinstance(payload, dict):
            return None, [], f"the candidate broke its tracer: {str(payload.get('error'))[:500]}"
        return None, [], "the tracer sent a malformed result"
    warnings = payload.get("warnings", [])
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        return None, [], "the tracer sent a malformed result (warnings)"
    warnings = [w[:2000] for w in warnings[:20]]
    if payload.get("ok") is True and isinstance(payload.get("artifact"), dict):
        return payload["artifact"], warnings, None
    reason = payload.get("reason")
    if payload.get("ok") is False and isinstance(reason, str) and reason:
        return None, warnings, reason
    return None, [], "the tracer sent a malformed result"


def read_samples(run: WorkerResult, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(value, slope) from the tracer's `sample` result; every field checked.

    Raises:
        SampleFailure: the tracer stopped, the candidate could not be sampled, or the result
            is not two lists of exactly `size` finite floats.
    """
    if run.status != "ok":
        raise SampleFailure("sample", run.reason or f"the tracer stopped ({run.status})")
    payload, kind = run.result.get("payload"), run.result.get("kind")
    if kind == "error" and isinstance(payload, dict):
        raise SampleFailure("sample", f"the candidate broke its tracer: {payload.get('error')}")
    if kind != "sample" or not isinstance(payload, dict) or not isinstance(payload.get("ok"), bool):
        raise SampleFailure("sample", "the tracer sent a malformed result")
    if not payload["ok"]:
        reason = payload.get("reason")
        raise SampleFailure("sample", reason if isinstance(reason, str) and reason else "no reason")
    value = _floats(payload.get("value"), size, "value")
    return value, _floats(payload.get("slope"), size, "slope")


def _floats(data: object, size: int, name: str) -> np.ndarray:
    """`data` as float32 when it is a list of exactly `size` finite floats (SampleFailure else)."""
    if not isinstance(data, list) or len(data) != size or any(type(x) is not float for x in data):
        raise SampleFailure(
            "sample", f"the tracer sent a malformed result ({name}s: not {size} floats)"
        )
    with np.errstate(over="ignore"):
        array = np.asarray(data, np.float64).astype(np.float32)
    if not np.all(np.isfinite(array)):
        raise SampleFailure("sample", f"the tracer sent a malformed result (non-finite {name}s)")
    return array
