"""Pre-flight: each candidate's artifact compiled and run alone at exactly the shapes the shared
training program will call it with, before that program is compiled. Trusted code (trainer).

Why: a batch's candidates share one compiled program per run config (rl/training.py's
BatchProgram). An artifact that works at the probes' sizes but cannot be compiled at the
trainer's (a forged `shape_assertion` of `n <= 127` on its VJP: the probes differentiate it on
64 elements, training on 128 per seed) made the *shared* compile fail, so the whole batch
failed, and the parent's split blamed whichever candidate had been probed last, 2N-1 trainer
jobs later, as an "internal evaluator error". The pre-flight finds such an artifact alone, in
the same trainer job and with its own reason, before the shared compile; the others are
compiled and trained without it, and score as they would alone (a candidate's numbers do not
depend on its batch).

How: the call sites are the sizes the trainer's own `init` and `segment` functions call the
task's programs with, read by *tracing* (not compiling) them around a trusted stand-in, the
task's baseline program (`tasks.behaviour.training_sizes`, once per process and run config,
shared with the behaviour check that runs before this: one trace serves both). Every
candidate of a batch is called at the same places with the same shapes (one
`lax.switch` passes all branches the same operands). Each candidate's forward program and VJP
are then compiled at each distinct shape and run once, on ones.

Measured on the 2-core CPU (CartPole, one seed): tracing 0.6-0.7 s per run config (drift: 2
call sites, forward and VJP on 128 elements; optimizer: 6 distinct shapes, 1 to 4096
elements); the pre-flight of one candidate 0.25 s (drift) and 1.0 s (optimizer).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
from jax import export as jax_export

from metarl.rl.configs import PPOConfig
from metarl.rl.training import BatchProgram, program_key
from metarl.rl.verifier.artifact import (
    ArtifactRejected,
    decode,
    encode,
    export_variants,
    load_exported,
    verify,
)
from metarl.tasks import Task
from metarl.tasks.behaviour import training_sizes
from metarl.tasks.candidate import load_function
from metarl.tasks.probing import describe_exception

logger = logging.getLogger(__name__)

Spec = tuple[tuple[int, ...], str]  # one input: its concrete shape and dtype name


@dataclass(frozen=True)
class CallSite:
    """Where the trainer calls a candidate's exported program: which variant, the forward
    program or its VJP, and the concrete input shapes."""

    variant: str
    vjp: bool
    inputs: tuple[Spec, ...]

    def describe(self) -> str:
        """E.g. "its VJP (epsilon=0.2) on 128 elements": for a reason the proposer reads."""
        what = "its VJP" if self.vjp else "the program"
        size = self.inputs[0][0][0] if self.inputs and self.inputs[0][0] else 1
        return f"{what} ({self.variant}) on {size} elements"


def _deserialize(blob: bytes):
    """An Exported from its serialised bytes (verified by the caller before it compiles)."""
    return jax_export.deserialize(bytearray(blob))


def baseline_artifact(task: Task, platform: str) -> dict[str, str]:
    """The task's baseline program (trusted source) exported as a candidate's artifact is:
    the stand-in the call sites are traced with, and the only candidate of the parent's
    control job (a trainer job without the batch's candidates)."""
    function = load_function(task.baseline_program().source, task.function_name)
    return encode(export_variants(task.per_element(function), task.element_signature, platform))


def call_sites(
    task: Task, config: PPOConfig, seeds: Sequence[int], platform: str
) -> list[CallSite]:
    """Every distinct place and shape at which the trainer calls a candidate on `config`.

    Args:
        task: the task (its baseline program is the traced stand-in).
        config: the run config of the shared program.
        seeds: the training seeds (vmapped: they set the number of elements per call).
        platform: the JAX platform artifacts are exported for.

    Returns:
        The call sites, in the order they are traced, without repeats.

    Raises:
        RuntimeError: a traced call is to no variant of the stand-in (a trainer bug).
    """
    blobs = decode(baseline_artifact(task, platform), set(task.per_element(lambda *a: None)))
    variants = load_exported(blobs, task.element_signature, platform)
    # the sizes the training program calls the task's programs with: traced once per process
    # and (task, config, number of seeds), shared with the behaviour check (tasks/behaviour.py)
    sizes = training_sizes(task, variants, [config], seeds)
    signature = task.element_signature
    sites: list[CallSite] = []
    for (variant, role), found in sizes.items():
        vjp = role == "vjp"
        slots = signature.inputs + (signature.outputs if vjp else ())
        for size in found:
            inputs = tuple(((int(size), *shape), dtype) for shape, dtype in slots)
            sites.append(CallSite(variant, vjp, inputs))
    return sites


def preflight(task: Task, artifact: object, sites: Sequence[CallSite], platform: str) -> str | None:
    """Compile and run the candidate's artifact alone at every call site.

    Args:
        task: the task the artifact implements.
        artifact: the encoded artifact (already verified by the trainer's probes stage;
            verified again here before anything is compiled).
        sites: where the trainer calls it (`call_sites`).
        platform: the JAX platform.

    Returns:
        None when it compiles and runs everywhere; else one reason, written for the proposer.
    """
    names = set(task.per_element(lambda *args: None))
    try:
        blobs = decode(artifact, names)
        programs = {}
        for name, blob in blobs.items():
            exported = _deserialize(blob)
            verify(exported, task.element_signature, platform)
            programs[name] = exported
    except ArtifactRejected as error:
        return f"the exported program was refused: {error}"
    except Exception as error:  # a malformed flatbuffer raises whatever its parser raises
        return f"the exported program does not deserialise ({type(error).__name__})"
    targets = [programs[s.variant].vjp() if s.vjp else programs[s.variant] for s in sites]
    error = _compile_and_run(targets, sites)
    if error is None:
        return None
    logger.info("pre-flight failed: %s", error)
    # name the call site that fails (only on this path: one compile per site)
    culprit = next(
        (
            (site, alone)
            for target, site in zip(targets, sites)
            if (alone := _compile_and_run([target], [site])) is not None
        ),
        (None, error),
    )
    where = culprit[0].describe() if culprit[0] else "the program at the trainer's shapes"
    return describe_exception(
        culprit[1],
        f"compiling {where} at the shapes the trainer calls it with (the probes passed at "
        "theirs; an exported program must work for any number of elements)",
    )


def _compile_and_run(targets: list, sites: Sequence[CallSite]) -> Exception | None:
    """Compile one program that calls every target at its site's shapes, and run it on ones
    (one compile for all sites: 6 optimizer sites take 1.0 s, not 2.7 s); the error or None."""
    specs = [
        [jax.ShapeDtypeStruct(shape, jnp.dtype(dtype)) for shape, dtype in site.inputs]
        for site in sites
    ]

    def every_site(*inputs):
        return [target.call(*args) for target, args in zip(targets, inputs)]

    try:
        compiled = jax.jit(every_site).lower(*specs).compile()
        jax.block_until_ready(compiled(*[[jnp.ones(x.shape, x.dtype) for x in s] for s in specs]))
    except Exception as error:  # compile or run failure at the trainer's shapes
        return error
    return None


@dataclass
class GroupPrograms:
    """The compiled program of one run config for a batch's live candidates.

    Attributes:
        programs: per position, (program, the candidate's index in it); None when it failed.
        failures: position -> why the candidate cannot be trained (its own reason).
        compile_s: per position, its pre-flight and its shares of the call-site tracing and
            the compile.
    """

    programs: list[tuple[BatchProgram, int] | None]
    failures: dict[int, str]
    compile_s: list[float]


def compile_group(
    task: Task,
    config: PPOConfig,
    candidates: Sequence,
    seeds: Sequence[int],
    platform: str,
    isolate: bool,
    report: Callable[..., None],
    stage: str = "short",
    learning_rates: Sequence[float] = (),
    programs_by_key: dict | None = None,
) -> GroupPrograms:
    """Pre-flight every candidate, then compile the program(s) that train those that passed.

    Each candidate's own work (its pre-flight; with `isolate`, its own program's compile)
    runs between `report("active", index=i)` and `report("active", index=None)`, so that the
    parent can blame whoever was running when a trainer hangs or dies. The shared program's
    compile runs with nobody active; when it raises, every candidate is compiled alone
    instead (its failure then its own).

    Args:
        task: the task the candidates implement.
        config: the run config.
        candidates: the live candidates, each with `index` (in the batch), `function` (the
            assembled artifact) and `artifact` (encoded).
        seeds: the training seeds.
        platform: the JAX platform.
        isolate: compile each candidate's program alone (the parent asks for it after a
            trainer died while no candidate was active).
        report: the trainer's progress callback.
        stage: the stage the candidates train in first (what a failure here stops them at).
        learning_rates: the rates the program sweeps (an extra vmapped axis); () for none.
        programs_by_key: the batch's programs compiled so far, by `program_key`: a run on
            another member of a family already compiled (a curriculum's next level) reuses
            them, its level an input (`BatchProgram.on`), with nothing traced or compiled and
            the same pre-flight verdicts. Filled in here. None: always compile.

    Returns:
        The programs, failures and compile-time shares, by position.
    """

    def active(index: int | None) -> None:
        report("active", index=index, **({"stage": stage} if index is not None else {}))

    key = (program_key(config), tuple(learning_rates), isolate)
    known = (programs_by_key or {}).get(key)
    if known is not None and all(c.index in known for c in candidates):
        return _reuse(config, candidates, known)
    start = time.perf_counter()
    sites = call_sites(task, config, seeds, platform)
    failures: dict[int, str] = {}
    compile_s = [(time.perf_counter() - start) / len(candidates)] * len(candidates)
    for position, candidate in enumerate(candidates):
        start = time.perf_counter()
        active(candidate.index)
        try:
            reason = preflight(task, candidate.artifact, sites, platform)
        finally:
            active(None)
        compile_s[position] += time.perf_counter() - start
        if reason is not None:
            failures[position] = reason
    left = [p for p in range(len(candidates)) if p not in failures]
    sweep = tuple(learning_rates) or None
    programs: list[tuple[BatchProgram, int] | None] = [None] * len(candidates)
    if left and not isolate:
        functions = [candidates[p].function for p in left]
        start = time.perf_counter()
        try:
            shared = BatchProgram(  # the from-scratch reference is the baseline's
                config, lambda i: task.select(functions, i), len(left), seeds, sweep, False
            )
        except Exception:  # not one candidate's fault as far as the pre-flight could tell
            logger.exception("the shared program of %d candidates did not compile", len(left))
            isolate = True
        else:
            share = (time.perf_counter() - start) / len(left)
            for slot, position in enumerate(left):
                programs[position] = (shared, slot)
                compile_s[position] += share
    for position in left if isolate else ():
        function = candidates[position].function
        start = time.perf_counter()
        active(candidates[position].index)
        try:
            programs[position] = (
                BatchProgram(
                    config, lambda i, f=function: task.select([f], i), 1, seeds, sweep, False
                ),
                0,
            )
        except Exception as error:  # this candidate's own program does not compile
            failures[position] = describe_exception(
                error, f"compiling the training program on {config.env_name} with it alone"
            )
        finally:
            active(None)
        compile_s[position] += time.perf_counter() - start
    if programs_by_key is not None:
        programs_by_key[key] = {
            c.index: failures.get(p) or programs[p] for p, c in enumerate(candidates)
        }
    return GroupPrograms(programs, failures, compile_s)


def _reuse(config: PPOConfig, candidates: Sequence, known: dict) -> GroupPrograms:
    """GroupPrograms for `candidates` out of another family member's (`compile_group`)."""
    programs, failures = [], {}
    for position, candidate in enumerate(candidates):
        entry = known[candidate.index]
        if isinstance(entry, str):
            failures[position] = entry
            programs.append(None)
        else:
            program, slot = entry
            programs.append((program.on(config), slot))
    return GroupPrograms(programs, failures, [0.0] * len(candidates))
