"""The `value_loss` task, the proof that a task is its folder and one registry line: its seeds
pass its probes, hostile critic losses fail them with a reason, its artifact is the Python
function, its baseline is PPO exactly, and MAML (no critic in its inner step) refuses it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metarl.rl.verifier import artifact
from metarl.tasks import get_task, meta_task_problem
from metarl.tasks.candidate import load_function
from metarl.tasks.probing import register_candidate_source

TASK = get_task("value_loss")
CHECKS = [
    "compiles",
    "shape_and_dtype",
    "finite",
    "elementwise",
    "vmaps",
    "finite_gradient",
    "gradient_of_values",
    "non_negative",
    "pulls_toward_target",
]


def probe(body: str, rng_seed: int = 0):
    source = f"def value_loss(value, old_value, target, epsilon):\n{body}"
    register_candidate_source(source)
    return TASK.probes(load_function(source, "value_loss"), rng_seed)


def test_it_fills_the_value_loss_slot_and_rl2_scores_it_but_maml_refuses_it():
    assert TASK.slot == "value_loss" and TASK.meta_learners == ("rl2",)
    assert meta_task_problem("value_loss", "bandit-tasks@rl2") is None
    problem = meta_task_problem("value_loss", "point-tasks@maml")
    assert "--meta maml trains only make_optimizer" in problem and "--meta rl2" in problem
    assert "\n" not in problem


@pytest.mark.parametrize("rng_seed", range(10))
def test_the_seeds_pass_on_any_probe_seed(rng_seed):
    for seed in TASK.seed_programs():
        register_candidate_source(seed.source)
        report = TASK.probes(load_function(seed.source, "value_loss"), rng_seed)
        assert report.ok and report.warnings == [], (seed.name, report.reason)


@pytest.mark.parametrize(
    "body, check, reason",
    [
        ("    return -0.5 * jnp.square(value - target)", "non_negative", "is negative"),
        ("    return 0.0 * value", "pulls_toward_target", "does not pull the critic"),
        (
            "    return jnp.exp(-jnp.square(value - target))",
            "pulls_toward_target",
            "pushes the critic away",
        ),
        (
            "    return lax.stop_gradient(0.5 * jnp.square(value - target)) + 0.0 * value",
            "gradient_of_values",
            "not the slope of its values",
        ),
        (
            # PPO's values with half the gradient: a forged slope
            "    v = lax.stop_gradient(value)\n"
            "    return 0.5 * jnp.square(v - target) + 0.5 * (value - v) * (v - target)",
            "gradient_of_values",
            "not the slope of its values",
        ),
        (
            "    return 0.5 * jnp.square(value - target).mean() + 0.0 * value",
            "elementwise",
            "not elementwise",
        ),
        ("    return jnp.square(value - target).sum()", "shape_and_dtype", ""),
        ("    return jnp.log(value - target)", "finite", "finite"),
    ],
)
def test_a_hostile_critic_loss_fails_the_probe_it_breaks(body, check, reason):
    report = probe(body)
    assert not report.ok
    assert CHECKS[len(report.checks)] == check  # report.checks: those passed before it
    assert reason in report.reason


def test_the_artifact_is_the_python_function_in_value_and_gradient():
    for seed in TASK.seed_programs():
        function = load_function(seed.source, "value_loss")
        blobs = artifact.export_variants(TASK.per_element(function), TASK.element_signature, "cpu")
        assembled = TASK.assemble(artifact.load_variants(blobs, TASK.element_signature, "cpu"))
        inputs = tuple(jnp.asarray(x) for x in TASK.fingerprint_inputs()[:3])
        for f in (
            lambda g: g,
            lambda g: jax.grad(lambda v, o, t, e: jnp.sum(g(v, o, t, e))),
        ):
            ours = f(assembled)(*inputs, 0.2)
            theirs = f(function)(*inputs, 0.2)
            np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-6, atol=1e-7)
        assert TASK.probes(assembled, 5).ok, seed.name
