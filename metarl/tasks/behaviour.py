"""The trainer's behavioural check of a task's artifact (rl/verifier/behaviour.py), wired to
the task.

Why here: the check needs the task's plumbing (how its function is assembled from the
artifact and plugged into the trainer) to read the trainer's call sizes off the training
program, and its fingerprint batch for in-domain example rows; the rl layer knows neither.

The call sizes depend only on the task, the configs and the number of seeds, so they are
traced once per process (a trainer job evaluates a batch of candidates) and reused; a trainer
job returns what it traced (`traced_sizes`) and the parent keeps it on disk beside the
baselines (evaluation/baseline_cache.py) and hands it to later jobs (`remember_sizes`), so a
machine traces each (task, config, number of seeds) once per version of metarl's code.

Cost, measured on the 2-core CPU (shared, load ~4; classic suite: 3 configs, 4 seeds): reading
the call sizes ~1.7 s per task and trainer job (one make_jaxpr of BatchProgram's init and
segment per config, then cached for the job's other candidates); the checks ~0.2-0.5 s per
drift candidate and ~0.8-1.8 s per optimizer rule (Adam, OPEN-lite: 12 sizes). Against a demo
candidate's evaluation (~30-60 s of training): 1-2% per drift and 1.5-6% per optimizer rule,
plus the per-job trace (3-6% when a job holds one candidate, less when it holds several).
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import numpy as np

from metarl.rl.configs import PPOConfig, program_key
from metarl.rl.verifier.artifact import ElementSignature, Variant
from metarl.rl.verifier.behaviour import (
    Role,
    capture_rows,
    check_variants,
    training_call_sizes,
)
from metarl.tasks.base import Task
from metarl.tasks.probing import fingerprint

_SIZES: dict[tuple, dict[Role, tuple[int, ...]]] = {}
_EXAMPLES: dict[str, dict[str, list[np.ndarray]]] = {}


def training_sizes(
    task: Task, variants: dict[str, Variant], configs: Sequence[PPOConfig], seeds: Sequence[int]
) -> dict[Role, tuple[int, ...]]:
    """The flat sizes each program of the artifact is called with in training (cached).

    Args:
        task: the task whose plumbing builds the trainer's components.
        variants: the verified artifact (traced, not run).
        configs: every configuration the candidate is trained with.
        seeds: the training seeds.

    Returns:
        (variant name, "forward" | "vjp") -> sorted distinct sizes over all configs.
    """
    seeds = [int(s) for s in seeds]

    def components(calls: dict[str, Callable]) -> Callable[[jax.Array], object]:
        function = task.assemble(calls)
        return lambda index: task.select([function], index)

    merged: dict[Role, set[int]] = {}
    for config in dict.fromkeys(configs):
        # shapes depend on how many seeds, not which, and on the env's family, not its level
        key = (task.name, program_key(config), len(seeds))
        if key not in _SIZES:
            _SIZES[key] = training_call_sizes(
                variants, task.element_signature, components, [config], seeds
            )
        for role, sizes in _SIZES[key].items():
            merged.setdefault(role, set()).update(sizes)
    return {role: tuple(sorted(sizes)) for role, sizes in merged.items()}


SizesJson = list  # [[variant, role, [size, ...]], ...]: one config's sizes, JSON-ready


def traced_sizes(task: Task, config: PPOConfig, n_seeds: int) -> SizesJson | None:
    """The call sizes this process holds for (task, config, number of seeds), JSON-ready; None
    when it has not traced them."""
    sizes = _SIZES.get((task.name, program_key(config), int(n_seeds)))
    if sizes is None:
        return None
    return [[variant, role, [int(s) for s in found]] for (variant, role), found in sizes.items()]


def remember_sizes(task: Task, config: PPOConfig, n_seeds: int, sizes: SizesJson) -> None:
    """Take the call sizes of (task, config, number of seeds) from the parent (traced by an
    earlier trainer job on this machine and code) instead of tracing them.

    Args:
        task: the task.
        config: the run config.
        n_seeds: the number of training seeds.
        sizes: as `traced_sizes` returns them (the parent validated them).
    """
    _SIZES[(task.name, program_key(config), int(n_seeds))] = {
        (str(variant), str(role)): tuple(sorted(int(s) for s in found))
        for variant, role, found in sizes
    }


def _default_rows(signature: ElementSignature, count: int = 64) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    rows = []
    for slots, dtype in signature.inputs:
        shape = (count,) + tuple(slots)
        if np.issubdtype(np.dtype(dtype), np.floating):
            rows.append(rng.normal(0.0, 1.0, shape).astype(dtype))
        else:
            rows.append(rng.integers(1, 100, shape).astype(dtype))
    return rows


def example_rows(task: Task) -> dict[str, list[np.ndarray]]:
    """The per-element rows the task's fingerprint batch becomes (in-domain examples; cached).

    Returns:
        variant name -> rows, one array per input (shape (rows, *slots)).
    """
    if task.name not in _EXAMPLES:
        _EXAMPLES[task.name] = _example_rows(task)
    return _EXAMPLES[task.name]


def _example_rows(task: Task) -> dict[str, list[np.ndarray]]:
    signature = task.element_signature
    names = list(task.per_element(lambda *args: None))
    if task.fingerprint_inputs is None:
        return {name: _default_rows(signature) for name in names}
    inputs = task.fingerprint_inputs()
    return capture_rows(names, signature, lambda calls: fingerprint(task.assemble(calls), inputs))


def check_artifact(
    task: Task,
    variants: dict[str, Variant],
    configs: Sequence[PPOConfig],
    seeds: Sequence[int],
    probe_seed: int,
) -> None:
    """The artifact is per-sample at the exact sizes training calls it with
    (rl/verifier/behaviour.py).

    Args:
        task: the task the artifact implements.
        variants: the verified artifact: the same objects the trainer will call.
        configs: every configuration the candidate is trained with.
        seeds: the training seeds.
        probe_seed: the trusted probe seed (random rows the candidate never saw).

    Raises:
        BehaviourRejected: a row's outputs depend on its batch, or the VJP is not linear in its
            cotangent.
    """
    sizes = training_sizes(task, variants, configs, seeds)
    # the actor loss is a mean over the minibatch: its cotangent is 1 / minibatch size
    scales = sorted({1.0 / config.minibatch_size for config in configs})
    check_variants(
        variants,
        task.element_signature,
        sizes,
        example_rows(task),
        probe_seed,
        scales if task.element_signature.differentiable else (),
    )
