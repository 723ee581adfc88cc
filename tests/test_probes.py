"""Stage 2: the tasks' probes, run in-process on trusted test functions (the cascade runs them in
the sandbox worker). Fast: small jitted calls only."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from metarl.blackbox.export import lpo_source
from metarl.rl.lpo import init_params
from metarl.tasks import get_task, task_names
from metarl.tasks.candidate import load_function
from metarl.tasks.drift.probes import gradient_disagreements, probe_inputs, training_inputs
from metarl.tasks.probing import (
    describe_exception,
    fingerprint,
    fingerprint_outputs,
    register_candidate_source,
)


def load(task_name: str, source: str):
    register_candidate_source(source)
    return load_function(source, get_task(task_name).function_name)


def probe(task_name: str, source: str, rng_seed: int = 0):
    return get_task(task_name).probes(load(task_name, source), rng_seed)


def drift(body: str) -> str:
    return f"def drift(ratio, advantage, epsilon):\n{body}"


def rule(body: str) -> str:
    return f"def optimizer(grad, param, momentum, state, step, progress, lr):\n{body}"


@pytest.mark.parametrize("task_name", task_names())
def test_tasks_have_probes_and_fingerprint_inputs(task_name):
    task = get_task(task_name)
    assert callable(task.probes) and callable(task.fingerprint_inputs)


@pytest.mark.parametrize(
    "task_name, seed_name",
    [(t, s.name) for t in task_names() for s in get_task(t).seed_programs()],
)
@pytest.mark.parametrize("rng_seed", [0, 12345])
def test_every_seed_passes_its_probes_without_warnings(task_name, seed_name, rng_seed):
    report = probe(task_name, get_task(task_name).seed_program(seed_name).source, rng_seed)
    assert report.ok, report.reason
    assert report.warnings == []


def test_fingerprints_are_deterministic_and_tell_programs_apart():
    prints = {}
    for task_name in task_names():
        task = get_task(task_name)
        for seed in task.seed_programs():
            function = load(task_name, seed.source)
            first = fingerprint(function, task.fingerprint_inputs())
            assert first == fingerprint(function, task.fingerprint_inputs())
            prints[(task_name, seed.name)] = first
    assert len(set(prints.values())) == len(prints)


def test_same_behaviour_different_source_has_the_same_fingerprint():
    task = get_task("drift")
    original = load("drift", task.seed_program("ppo_clip").source)
    rewritten = load(
        "drift",
        drift(
            "    upper = 1.0 + epsilon\n    lower = 1.0 - epsilon\n"
            "    excess = ratio - jnp.minimum(jnp.maximum(ratio, lower), upper)\n"
            "    return jnp.maximum(excess * advantage, 0.0)\n"
        ),
    )
    different = load(
        "drift",
        drift("    return 2.0 * jax.nn.relu((ratio - jnp.clip(ratio, 0.8, 1.2)) * advantage)\n"),
    )
    inputs = task.fingerprint_inputs()
    assert fingerprint(original, inputs) == fingerprint(rewritten, inputs)
    assert fingerprint(original, inputs) != fingerprint(different, inputs)


def test_fingerprint_rounding_ignores_float_noise():
    import numpy as np

    x = np.linspace(0.1, 3.0, 50, dtype=np.float32)
    assert fingerprint_outputs(x) == fingerprint_outputs(x * (1 + 1e-7))
    assert fingerprint_outputs(x) != fingerprint_outputs(x * 1.01)
    assert fingerprint_outputs(np.zeros(3)) == fingerprint_outputs(-np.zeros(3))


@pytest.mark.parametrize(
    "body, reason",
    [
        (
            "    return (ratio[:, None] - 1.0) * advantage\n",
            "has shape (64, 64) for ratio of shape (64,); expected exactly (64,)",
        ),
        ("    return jnp.sum(ratio)\n", "has shape () for ratio of shape (64,)"),
        ("    return ratio > 1.0\n", "has dtype bool"),
        ("    return ratio.astype(jnp.int32)\n", "has dtype int32"),
        ("    return (1.0, 2.0)\n", "is a tuple, not an array"),
        (
            "    if ratio.mean() > 1.0:\n        return ratio\n    return ratio\n",
            "TracerBoolConversionError at line 2 (`if ratio.mean() > 1.0:`)",
        ),
        ("    return ratio * float(advantage.max())\n", "ConcretizationTypeError at line 2"),
        ("    return ratio + 'x'\n", "TypeError at line 2 (`return ratio + 'x'`)"),
        (
            "    return jax.nn.relu(jnp.log(ratio - 1.0) * advantage)\n",
            "drift returned nan at ratio=",
        ),
        (
            "    return jnp.sqrt(jnp.abs(ratio - 1.0))\n",
            "gradient of drift with respect to ratio is inf",
        ),
        ("    return (ratio - 1.0) * advantage\n", "drift is negative"),
        ("    return (ratio - jnp.mean(ratio)) ** 2\n", "drift is not elementwise"),
        (
            "    return jnp.square(ratio - 1.0) * jnp.linspace(1.0, 2.0, ratio.shape[-1])\n",
            "not elementwise",
        ),
        ("    return jnp.square(ratio - 1.0) * (ratio.shape[0] == 64)\n", "not elementwise"),
    ],
)
def test_drift_probe_failures(body, reason):
    report = probe("drift", drift(body))
    assert not report.ok
    assert reason in report.reason, report.reason


@pytest.mark.parametrize(
    "body, reason",
    [
        ("    return jnp.abs(ratio - 1.0) + 0.1\n", "drift is 0.1 (not 0) at ratio=1"),
        # jnp.maximum splits the gradient at a tie: slope 0.5 * |A| at ratio = 1
        (
            "    return jnp.maximum(ratio - 1.0, 0.0) * jnp.abs(advantage)\n",
            "d drift / d ratio is 16 (not 0) at ratio=1, advantage=-32",
        ),
        # only for |A| beyond the probe batch's: the training range is checked too
        (
            "    return jnp.square(ratio - 1.0) + 1e-3 * jax.nn.relu(jnp.abs(advantage) - 8.0)\n",
            "(not 0) at ratio=1, advantage=-32",
        ),
    ],
)
def test_drift_nonzero_or_sloped_at_ratio_one_is_refused(body, reason):
    report = probe("drift", drift(body))
    assert not report.ok
    assert reason in report.reason, report.reason


def test_a_squared_penalty_is_zero_and_flat_at_ratio_one():
    report = probe("drift", drift("    return 0.5 * jnp.square(ratio - 1.0)\n"))
    assert report.ok, report.reason
    assert report.warnings == []


SYMBOLIC_STYLE = drift(
    "    def fitted(log_r, r1, a):\n"
    "        return jnp.abs(a) * jnp.square(r1) + 0.3 * jnp.tanh(log_r * a) + jnp.exp(-r1 * r1)\n"
    "    zero = 0.0 * ratio\n"
    "    value = fitted(jnp.log(ratio), ratio - 1.0, advantage) - fitted(zero, zero, advantage)\n"
    "    return jax.nn.relu(value - 1e-6)\n"
)


def honest_drifts() -> dict[str, str]:
    task = get_task("drift")
    network = jax.tree.map(lambda x: 3.0 * x, init_params(jax.random.PRNGKey(0)))
    return {
        "ppo_clip": task.seed_program("ppo_clip").source,
        "lpo": task.seed_program("lpo").source,
        "lpo network": lpo_source(network),
        "symbolic style": SYMBOLIC_STYLE,
        "kl style": drift("    return jnp.abs(advantage) * (ratio - 1.0 - jnp.log(ratio))\n"),
        "tanh": drift("    return jnp.square(jnp.tanh(advantage * (ratio - 1.0)))\n"),
        "quadratic": drift(
            "    return 0.5 * jnp.square(ratio - 1.0) * (1.0 + jnp.abs(advantage))\n"
        ),
    }


HONEST = ["ppo_clip", "lpo", "lpo network", "symbolic style", "kl style", "tanh", "quadratic"]


@pytest.mark.parametrize("name", HONEST)
def test_honest_gradients_are_the_slopes_of_their_values_for_50_probe_seeds(name):
    """The tolerance of check 7 holds for honest drifts whatever the probe seed, on the probe
    batch and on the training-range batches (none allowed to disagree; kinks such as
    PPO-clip's at 1 +- eps included)."""
    function = load("drift", honest_drifts()[name])
    values = jax.jit(lambda r, a: function(r, a, 0.2))
    grad = jax.jit(jax.grad(lambda r, a: jnp.sum(function(r, a, 0.2))))
    for rng_seed in range(50):
        for ratio, advantage in [probe_inputs(rng_seed), *training_inputs(rng_seed)]:
            bad = gradient_disagreements(values, grad, ratio, advantage)
            assert not bad[ratio[bad] != 1.0].size, (rng_seed, ratio[bad], advantage[bad])


@pytest.mark.parametrize("name", HONEST)
def test_honest_drifts_pass_every_probe(name):
    report = probe("drift", honest_drifts()[name], 3)
    assert report.ok, report.reason


FORGED_GRADIENTS = {
    "negated": "c + (ratio - jax.lax.stop_gradient(ratio)) * (-2.0 * advantage)",
    "scaled by 0.9": "jax.lax.stop_gradient(c) + 0.9 * (c - jax.lax.stop_gradient(c))",
    "stopped": "jax.lax.stop_gradient(c)",
    "changed for |A| > 1.5": (
        "c + (ratio - jax.lax.stop_gradient(ratio)) * jnp.where(jnp.abs(advantage) > 1.5, "
        "advantage, 0.0)"
    ),
    # where the probe batch (normalised, plus +-3) does not look but training goes
    "negative drift's for |A| > 4": (
        "c + jnp.where(jnp.abs(advantage) > 4.0, -8.0 * (ratio - 1.0) ** 2 * jnp.abs(advantage)"
        " - jax.lax.stop_gradient(-8.0 * (ratio - 1.0) ** 2 * jnp.abs(advantage)), 0.0)"
    ),
    "negated for |A| > 8": (
        "c + (ratio - jax.lax.stop_gradient(ratio)) * jnp.where(jnp.abs(advantage) > 8.0, "
        "-2.0 * advantage, 0.0)"
    ),
}


@pytest.mark.parametrize("forgery", FORGED_GRADIENTS)
@pytest.mark.parametrize("rng_seed", [0, 7, 12345])
def test_a_gradient_that_is_not_the_slope_of_the_values_is_refused(forgery, rng_seed):
    """PPO-clip's values with another gradient (what training would follow)."""
    body = (
        "    c = jax.nn.relu((ratio - jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)) * advantage)\n"
        f"    return {FORGED_GRADIENTS[forgery]}\n"
    )
    report = probe("drift", drift(body), rng_seed)
    assert not report.ok
    assert "is not the slope of its values" in report.reason, report.reason


@pytest.mark.parametrize(
    "body, reason",
    [
        (
            "    return -lr * grad / (jnp.linalg.norm(grad) + 1e-8), state\n",
            "not elementwise: changing some elements",
        ),
        ("    return -lr * grad / (jnp.mean(jnp.abs(grad)) + 1e-8), state\n", "not elementwise"),
        (
            "    return -lr * grad * jnp.linspace(0.5, 1.5, grad.size).reshape(grad.shape), "
            "state\n",
            "permuting the elements",
        ),
        ("    return -lr * jnp.sort(grad.ravel()).reshape(grad.shape), state\n", "not elementwise"),
        ("    return -lr * grad\n", "optimizer returned a single array of shape (6, 5)"),
        ("    return -lr * grad, state, 0.0\n", "returned a tuple of length 3"),
        (
            "    return -lr * grad, state[0]\n",
            "new_state has shape (6, 5) for a parameter of shape (6, 5); expected exactly (4, 6, "
            "5)",
        ),
        ("    return (-lr * grad)[None], state\n", "update has shape (1, 6, 5)"),
        ("    return -lr * jnp.sum(grad), state\n", "update has shape ()"),
        ("    return grad > 0, state\n", "update has dtype bool"),
        (
            "    if step < 10:\n        return -lr * grad, state\n    return -lr * grad, state\n",
            "TracerBoolConversionError at line 2 (`if step < 10:`)",
        ),
        (
            "    return -lr * grad / state[1], state.at[1].set(state[1] + grad ** 2)\n",
            "nan/inf at step 1 of",
        ),
        (
            "    return -lr * grad * jnp.exp(100.0 * step), state\n",
            "update contains -inf for a parameter of shape (6, 5)",
        ),
    ],
)
def test_optimizer_probe_failures(body, reason):
    report = probe("optimizer", rule(body))
    assert not report.ok
    assert reason in report.reason, report.reason


def test_optimizer_ascent_is_a_warning():
    report = probe("optimizer", rule("    return lr * grad, state\n"))
    assert report.ok, report.reason
    assert any("gradient ascent" in w for w in report.warnings)


def test_optimizer_rules_using_momentum_and_state_pass():
    report = probe(
        "optimizer",
        rule(
            "    m = momentum[2]\n    v = state[0] * 0.99 + 0.01 * grad ** 2\n"
            "    update = -lr * m / (jnp.sqrt(v) + 1e-8) * (1.0 - progress)\n"
            "    return update, state.at[0].set(v)\n"
        ),
    )
    assert report.ok, report.reason


def test_describe_exception_names_the_candidate_line():
    source = "def drift(ratio, advantage, epsilon):\n    x = ratio\n    return x[5, 5, 5]\n"
    function = load("drift", source)
    import jax.numpy as jnp

    try:
        function(jnp.ones(3), jnp.ones(3), 0.2)
    except Exception as error:  # noqa: BLE001
        text = describe_exception(error, "calling drift", "an array")
    assert text.startswith("IndexError at line 3 (`return x[5, 5, 5]`) while calling drift: ")
    assert text.endswith("Expected: an array")
