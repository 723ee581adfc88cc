"""Candidate artifacts are parsed first in a throwaway worker, never first in the trainer.

Why (measured by an attacker): a few byte-flipped artifacts crash JAX's C++ deserialiser
(StableHLO's bytecode reader aborts or segfaults: flipping each of the first 9920 bytes of the
PPO-clip seed's 13 KB export one at a time gave 4 SIGABRTs, 5 SIGSEGVs and one process that was
SIGKILLed), and the trusted trainer was the first process to parse candidate bytes, with the
writable compilation cache in its hands and the whole batch on it.

How: before a generation's artifacts go to any trainer, one job in a fresh *tracer-type*
worker decodes, deserialises and verifies all of them with the trainer's own loader
(stages.load_artifact: decode, `jax.export.deserialize`, the module checks). That worker has
never run candidate Python (every worker runs exactly one job, and this job runs none), has no
compilation cache, no device and the tracer's seccomp filter (os_limits.py). For each artifact
it returns ok or the loader's reason, with the sha256 of the artifact it checked
(`artifact_digest`, canonical JSON). The parent sends an artifact to the trainer only when its
own digest of that artifact equals the digest of an ok check. When the job gives no result
(a crash, a timeout, memory), every artifact is checked again alone, at once (`workers` jobs
at a time): one whose check crashes alone fails with "the exported program crashes JAX's
deserialiser (SIGABRT)"; the others go on. A check that cannot run at all (a worker that
never started, an error in the checker's own code) is an evaluator fault.

Cost, measured on the 2-core VM (CPU-2, shared with other jobs) by timing `precheck` on copies
of the PPO-clip seed's artifact with a pre-warmed spare: one job of 1 or 4 artifacts takes
0.1-0.2 s, of 16 artifacts 0.4-0.7 s, so ~0.03 s per artifact (decode, deserialise, verify)
plus ~0.1 s per generation for the hand-off and teardown; the spare's replacement (~3 s of
imports) overlaps the training. A crash costs one more job per artifact, `workers` at a time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import signal
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable

from metarl.evaluation.outcome import Outcome

if TYPE_CHECKING:  # the worker imports this module too: it needs no sandbox machinery
    from metarl.evaluation.sandbox import WorkerResult

logger = logging.getLogger(__name__)

KIND = "check_artifacts"
CRASH = "the exported program crashes JAX's deserialiser"
RunJob = Callable[[dict, float], "WorkerResult"]  # (job, limit) -> result, in a tracer-type worker


def artifact_digest(artifact: object) -> str:
    """The sha256 of an encoded artifact (canonical JSON): what a check vouches for.

    Args:
        artifact: the tracer's encoded artifact (variant name -> base64 text), untrusted.

    Returns:
        The hex digest; equal for equal artifacts however their keys are ordered.
    """
    text = json.dumps(artifact, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def check_in_worker(task, artifacts: list, platform: str) -> dict:
    """The worker's half: load every artifact as the trainer would; a JSON-ready payload.

    Args:
        task: the task the artifacts implement.
        artifacts: encoded artifacts (untrusted).
        platform: the platform the trainer compiles for.

    Returns:
        {"checks": [{"digest", "ok", "reason"}, ...]}, one per artifact, in order.
    """
    from metarl.evaluation import stages  # lazy: JAX, in the worker only

    checks = []
    for artifact in artifacts:
        check = {"digest": artifact_digest(artifact), "ok": True, "reason": None}
        try:
            stages.load_artifact(task, artifact, platform)
        except stages.StageFailure as failure:
            check.update(ok=False, reason=failure.reason)
        except MemoryError:
            check.update(ok=False, reason=f"{CRASH}: it exhausts memory while being parsed")
        checks.append(check)
    return {"checks": checks}


def _job(task_name: str, artifacts: list, platform: str) -> dict:
    return {"kind": KIND, "task": task_name, "artifacts": artifacts, "platform": platform}


def _verdicts(run: "WorkerResult", digests: list[str]) -> list[Outcome | None] | None:
    """Each artifact's verdict from a check job (None: may train), or None when the job gave
    no usable result (then each artifact is checked alone)."""
    if run.status != "ok" or run.result.get("kind") != KIND:
        return None
    payload = run.result.get("payload")
    checks = payload.get("checks") if isinstance(payload, dict) else None
    if not isinstance(checks, list) or len(checks) != len(digests):
        logger.error("malformed artifact check result: %r", str(payload)[:300])
        return None
    verdicts: list[Outcome | None] = []
    for check, digest in zip(checks, digests):
        if not isinstance(check, dict) or not isinstance(check.get("ok"), bool):
            return None
        if check.get("digest") != digest:
            verdicts.append(
                Outcome.failure("probes", "the artifact checked is not the artifact sent")
            )
        elif check["ok"]:
            verdicts.append(None)
        else:
            reason = check.get("reason")
            verdicts.append(
                Outcome.failure("probes", reason if isinstance(reason, str) and reason else CRASH)
            )
    return verdicts


def _signal_of(returncode: int | None) -> str:
    """The signal a checker died of (bwrap exits 128 + N when its child dies of N)."""
    if returncode is None:
        return "no exit status"
    number = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"exit status {returncode}"


def _blame(run: "WorkerResult") -> Outcome:
    """The verdict on an artifact whose check, alone, gave no usable result."""
    if run.status == "died":
        return Outcome.failure("probes", f"{CRASH} ({_signal_of(run.returncode)})")
    if run.status == "memory":
        return Outcome.failure("probes", f"{CRASH}: it exhausts memory ({run.reason})")
    if run.status == "timeout":
        return Outcome.failure("probes", f"{CRASH}: it hangs ({run.reason})")
    if run.status == "ok":
        payload = run.result.get("payload")
        error = payload.get("error") if isinstance(payload, dict) else None
        return Outcome.evaluator_fault(f"the artifact check failed: {str(error)[:500]}")
    return Outcome.evaluator_fault(f"the artifact check did not run: {run.reason}")


def precheck(
    run: RunJob, task_name: str, artifacts: list, platform: str, limit: float, parallel: int
) -> list[Outcome | None]:
    """Check a generation's artifacts before training; None for each that may be trained.

    Args:
        run: runs one job in a fresh tracer-type worker within `limit` seconds.
        task_name: the task the artifacts implement.
        artifacts: the encoded artifacts, exactly as they will be sent to the trainer.
        platform: the platform the trainer compiles for.
        limit: seconds per check job.
        parallel: single checks run at once after a batch check gave no result.

    Returns:
        One entry per artifact: None (checked ok, digest matching) or its failed Outcome.
    """
    if not artifacts:
        return []
    digests = [artifact_digest(artifact) for artifact in artifacts]
    batch = run(_job(task_name, list(artifacts), platform), limit)
    verdicts = _verdicts(batch, digests)
    if verdicts is not None:
        return verdicts
    if len(artifacts) == 1:
        return [_blame(batch)]
    logger.warning(
        "the artifact check of %d artifacts gave no result (%s); checking each alone",
        len(artifacts),
        batch.reason or batch.status,
    )

    def alone(index: int) -> Outcome | None:
        single = run(_job(task_name, [artifacts[index]], platform), limit)
        verdict = _verdicts(single, [digests[index]])
        return verdict[0] if verdict is not None else _blame(single)

    with ThreadPoolExecutor(max(1, int(parallel)), thread_name_prefix="metarl-precheck") as pool:
        return list(pool.map(alone, range(len(artifacts))))
