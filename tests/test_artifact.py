"""Exported artifacts: the only form in which a candidate reaches the trainer.

A compromised tracer can send any bytes, so these tests forge artifacts the honest tracer would
never produce (exported without the per-element vmap, with host callbacks, with the batch size
used as a value) and check that the trainer's verification refuses each with a reason; and that
honest artifacts are exact, elementwise and independent of how many elements are computed.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export as jax_export

from metarl.evaluation.text import clean
from metarl.rl import artifact
from metarl.rl.artifact import ArtifactRejected
from metarl.rl.components import Components
from metarl.rl.configs import default_config
from metarl.rl.training import run_training
from metarl.tasks import get_task
from metarl.tasks.candidate import load_function

DRIFT = get_task("drift")
OPTIMIZER = get_task("optimizer")
SIGNATURE = DRIFT.element_signature


def honest(task, source=None):
    function = load_function(source or task.baseline_program().source, task.function_name)
    return artifact.export_variants(task.per_element(function), task.element_signature, "cpu")


def forged(function, *, vmapped=False, disabled=()):
    """What a compromised tracer could send: `function` exported on whole (n,) arrays."""
    (n,) = jax_export.symbolic_shape("n")
    spec = jax.ShapeDtypeStruct((n,), jnp.float32)
    target = jax.vmap(function) if vmapped else function
    exported = jax_export.export(
        jax.jit(target), platforms=["cpu"], disabled_checks=list(disabled)
    )(spec, spec)
    return {"epsilon=0.2": bytes(exported.serialize(vjp_order=1))}


def test_honest_seed_artifacts_verify_and_reproduce_ppo_bit_for_bit():
    config = default_config("CartPole-v1", total_timesteps=4096)
    reference = run_training(config, Components(), [0, 1])
    for task in (DRIFT, OPTIMIZER):
        calls = artifact.load_variants(honest(task), task.element_signature, "cpu")
        run = run_training(config, task.plug(task.assemble(calls)), [0, 1])
        assert run.final_returns == reference.final_returns
        assert run.curve == reference.curve


@pytest.mark.parametrize(
    "name, function, reason",
    [
        (
            "mean over the batch",
            lambda r, a: jax.nn.relu(r - jnp.mean(r)) * a,
            "reduction over the batch",
        ),
        (
            "batch size as a value",
            lambda r, a: jax.nn.relu(r - 1.0) * r.shape[0],
            "size of the batch",
        ),
        ("positions", lambda r, a: jax.nn.relu(r - 1.0) * jnp.arange(r.shape[0]), "batch axis"),
        ("sorted", lambda r, a: jnp.sort(r) * a, "sort along the batch axis"),
        ("cumulative", lambda r, a: jnp.cumsum(r) * a, "batch"),
        ("reversed", lambda r, a: r[::-1] * a, "batch"),
        ("neighbour", lambda r, a: jnp.roll(r, 1) * a, "batch axis"),
    ],
)
def test_a_forged_non_elementwise_artifact_is_refused(name, function, reason):
    with pytest.raises(ArtifactRejected, match=reason):
        artifact.load_variants(forged(function), SIGNATURE, "cpu")


def test_a_host_callback_or_io_in_the_module_is_refused():
    # jax 0.9.2 cannot even export a host callback; a hand-written module can contain one
    template = """
module @forged {
  func.func public @main(%arg0: tensor<?xf32>, %arg1: tensor<?xf32>) -> tensor<?xf32> {
    %0 = BODY
    return %0 : tensor<?xf32>
  }
}"""
    bodies = {
        "custom call": "stablehlo.custom_call @xla_python_cpu_callback(%arg0) "
        "{api_version = 2 : i32, has_side_effect = true} : (tensor<?xf32>) -> tensor<?xf32>",
        "not allowed": '"stablehlo.optimization_barrier"(%arg0) : (tensor<?xf32>) -> tensor<?xf32>',
    }
    for reason, body in bodies.items():
        text = template.replace("BODY", body)
        if reason == "not allowed":
            artifact.check_module(text)  # an ordinary op passes: the check is not a blanket no
            continue
        with pytest.raises(ArtifactRejected, match=reason):
            artifact.check_module(text)
    outfeed = template.replace(
        "%0 = BODY\n", "%t = stablehlo.after_all : !stablehlo.token\n"
    ).replace("return %0", "return %arg0")
    with pytest.raises(ArtifactRejected, match="not allowed"):
        artifact.check_module(outfeed)


def test_a_forged_debug_print_is_refused():
    def talk(r, a):
        jax.debug.print("ratio {}", r)
        return r * a

    with pytest.raises((ArtifactRejected, Exception)):
        # jax.export itself refuses effects; a forged module that has them is refused by us
        artifact.load_variants(forged(talk, vmapped=True), SIGNATURE, "cpu")


@pytest.mark.parametrize(
    "blobs, reason",
    [
        ({"epsilon=0.2": b"not a flatbuffer"}, "does not deserialise"),
        ({"epsilon=0.2": b""}, "does not deserialise"),
    ],
)
def test_garbage_bytes_are_refused(blobs, reason):
    with pytest.raises(ArtifactRejected, match=reason):
        artifact.load_variants(blobs, SIGNATURE, "cpu")


def test_wrong_signatures_are_refused():
    optimizer_blob = honest(OPTIMIZER)["rule"]
    with pytest.raises(ArtifactRejected, match="input"):
        artifact.load_variants({"epsilon=0.2": optimizer_blob}, SIGNATURE, "cpu")
    (n,) = jax_export.symbolic_shape("n")
    spec = jax.ShapeDtypeStruct((n,), jnp.float32)
    as_int = jax_export.export(jax.jit(lambda r, a: (r * a).astype(jnp.int32)))(spec, spec)
    with pytest.raises(ArtifactRejected, match="output 0 is int32"):
        artifact.load_variants(
            {"epsilon=0.2": bytes(as_int.serialize(vjp_order=0))}, SIGNATURE, "cpu"
        )


def test_variant_names_and_encoding_are_checked():
    with pytest.raises(ArtifactRejected, match="expected"):
        artifact.decode({"epsilon=0.2": "", "extra": ""}, {"epsilon=0.2"})
    with pytest.raises(ArtifactRejected, match="base64"):
        artifact.decode({"epsilon=0.2": "%%%"}, {"epsilon=0.2"})
    with pytest.raises(ArtifactRejected):
        artifact.decode(["not", "a", "dict"], {"epsilon=0.2"})
    blobs = honest(DRIFT)
    assert artifact.decode(json.loads(json.dumps(artifact.encode(blobs))), set(blobs)) == blobs


def test_an_element_never_depends_on_how_many_are_computed_with_it():
    calls = artifact.load_variants(
        honest(DRIFT, DRIFT.seed_program("lpo").source), SIGNATURE, "cpu"
    )
    drift = DRIFT.assemble(calls)
    rng = np.random.default_rng(0)
    ratio = jnp.asarray(np.exp(rng.normal(0, 0.5, (8, 96))), jnp.float32)
    advantage = jnp.asarray(rng.normal(0, 1, (8, 96)), jnp.float32)
    alone = np.stack(
        [
            np.asarray(jax.jit(drift, static_argnums=2)(ratio[i], advantage[i], 0.2))
            for i in range(8)
        ]
    )
    batched = np.asarray(jax.jit(jax.vmap(lambda r, a: drift(r, a, 0.2)))(ratio, advantage))
    nested = np.asarray(
        jax.jit(jax.vmap(jax.vmap(lambda r, a: drift(r, a, 0.2))))(
            ratio.reshape(2, 4, 96), advantage.reshape(2, 4, 96)
        )
    ).reshape(8, 96)
    assert np.array_equal(alone, batched) and np.array_equal(batched, nested)


def test_the_exported_vjp_matches_the_candidates_own_gradient():
    source = DRIFT.seed_program("lpo").source
    calls = artifact.load_variants(honest(DRIFT, source), SIGNATURE, "cpu")
    drift = DRIFT.assemble(calls)
    original = load_function(source, "drift")
    ratio = jnp.linspace(0.5, 2.0, 64, dtype=jnp.float32)
    advantage = jnp.linspace(-2.0, 2.0, 64, dtype=jnp.float32)
    grad = jax.grad(lambda r: jnp.sum(drift(r, advantage, 0.2)))(ratio)
    expected = jax.grad(lambda r: jnp.sum(original(r, advantage, 0.2)))(ratio)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(expected), rtol=1e-6, atol=1e-7)


def test_training_records_a_negative_drift_on_the_trainers_own_minibatches():
    config = default_config("CartPole-v1", total_timesteps=2048)

    def sneaky(ratio, advantage, epsilon):  # >= 0 near ratio 1, negative once the policy moves
        return jnp.where(jnp.abs(ratio - 1.0) > 0.01, -1e-3, 0.0) + 0.0 * advantage

    run = run_training(config, Components(drift=sneaky), [0])
    assert run.negative_drift_update is not None and run.min_drift < -1e-5
    clean_run = run_training(config, Components(), [0])
    assert clean_run.negative_drift_update is None and clean_run.min_drift >= 0.0


def test_training_records_nan_kept_in_the_optimizer_state():
    config = default_config("CartPole-v1", total_timesteps=2048)
    source = (
        "def optimizer(grad, param, momentum, state, step, progress, lr):\n"
        "    return -lr * grad, state.at[3].set(jnp.nan)\n"
    )
    rule = load_function(source, "optimizer")
    run = run_training(config, OPTIMIZER.plug(rule), [0])
    assert run.nonfinite_update == 0


def test_candidate_text_is_cleaned_of_escapes_and_secrets(monkeypatch):
    monkeypatch.setenv("ACME_API_KEY", "sk-live-0123456789")
    text = "\x1b[32mPASSED\x1b[0m fitness 999 \x07 key=sk-live-0123456789\nnext line"
    cleaned = clean(text)
    assert "\x1b" not in cleaned and "\x07" not in cleaned
    assert "sk-live-0123456789" not in cleaned and "[redacted]" in cleaned
    assert "\nnext line" in cleaned
    assert len(clean("x" * 100_000, limit=1000)) <= 1000
