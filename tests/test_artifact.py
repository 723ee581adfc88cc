"""Exported artifacts: the only form in which a candidate reaches the trainer.

A compromised tracer can send any bytes, so these tests forge artifacts the honest tracer would
never produce (exported without the per-element vmap, with host callbacks, with the batch size
used as a value) and check that the trainer's verification refuses each with a reason; and that
honest artifacts are exact, elementwise and independent of how many elements are computed.
"""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export as jax_export

from metarl.evaluation.text import clean
from metarl.rl.components import Components
from metarl.rl.configs import default_config
from metarl.rl.training import run_training
from metarl.rl.verifier import artifact
from metarl.rl.verifier.artifact import ArtifactRejected
from metarl.tasks import get_task, task_names
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
    for task in map(get_task, task_names()):
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


def ppo_clip(r, a):
    return jax.nn.relu((r - jnp.clip(r, 0.8, 1.2)) * a)


def row_zero(r):
    """r[0] as a gather with a constant index (no size arithmetic for the checker to see)."""
    numbers = jax.lax.GatherDimensionNumbers(
        offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,)
    )
    mode = jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS
    return jax.lax.gather(r, jnp.zeros((1,), jnp.int32), numbers, (1,), mode=mode)


@pytest.mark.parametrize(
    "name, function, reason",
    [
        (
            "scatter into a fixed-size buffer",
            lambda r, a: (
                ppo_clip(r, a) + 1e-3 * jnp.zeros(8).at[jnp.zeros(r.shape, jnp.int32)].add(a * a)[0]
            ),
            "scatter across the batch axis",
        ),
        (
            "einsum over the batch",
            lambda r, a: ppo_clip(r, a) + 1e-3 * jnp.einsum("i,i->", r, a),
            "product across the batch axis",
        ),
        (
            "gather at a fixed batch position",
            lambda r, a: ppo_clip(r, a) * (1.0 + 1e-3 * row_zero(r)),
            "gather across the batch axis",
        ),
        (
            "rng",
            lambda r, a: ppo_clip(r, a) + 1e-3 * jax.lax.rng_uniform(0.0, 1.0, ()),
            "stablehlo.rng is not allowed",
        ),
        (
            "rng_bit_generator",
            lambda r, a: (
                ppo_clip(r, a)
                + 1e-9
                * jax.lax.rng_bit_generator(jnp.zeros(4, jnp.uint32), (), dtype=jnp.uint32)[
                    1
                ].astype(jnp.float32)
            ),
            "rng_bit_generator is not allowed",
        ),
    ],
)
def test_a_forged_batch_mixing_or_random_artifact_is_refused(name, function, reason):
    # stop_gradient: the VJP stays clean, so the forward program alone must be refused
    def forward_only(r, a):
        return jax.lax.stop_gradient(function(r, a)) + 0.0 * r

    with pytest.raises(ArtifactRejected, match=reason):
        artifact.load_variants(forged(forward_only), SIGNATURE, "cpu")


MODULE = """
module @forged {
  func.func public @main(%arg0: tensor<?xf32>, %arg1: tensor<?xf32>) -> tensor<?xf32> {
    %n = stablehlo.get_dimension_size %arg0, dim = 0 : (tensor<?xf32>) -> tensor<i32>
    %s = stablehlo.reshape %n : (tensor<i32>) -> tensor<1xi32>
    %z = stablehlo.constant dense<0> : tensor<1xi32>
    %o = stablehlo.constant dense<1> : tensor<1xi32>
    %c = stablehlo.constant dense<1.0> : tensor<512xf32>
    %f = stablehlo.constant dense<0.0> : tensor<f32>
BODY
  }
}"""


@pytest.mark.parametrize(
    "name, body, reason",
    [
        # a static operand is shape-compatible with `?`: at n = 512 row i meets element i
        (
            "elementwise with a fixed-size array",
            "%0 = stablehlo.add %arg0, %c : (tensor<?xf32>, tensor<512xf32>) -> tensor<?xf32>",
            "combines values on the batch axis with a fixed-size array",
        ),
        (
            "select from a fixed-size array",
            "%p = stablehlo.compare GT, %arg0, %arg1 : (tensor<?xf32>, tensor<?xf32>) -> "
            "tensor<?xi1>\n%0 = stablehlo.select %p, %arg0, %c : (tensor<?xi1>, tensor<?xf32>, "
            "tensor<512xf32>) -> tensor<?xf32>",
            "fixed-size array",
        ),
        (
            "chlo broadcast with a fixed-size array",
            "%0 = chlo.broadcast_add %arg0, %c : (tensor<?xf32>, tensor<512xf32>) -> tensor<?xf32>",
            "fixed-size array",
        ),
        (
            "broadcast of a fixed-size array along the batch",
            "%b = stablehlo.dynamic_broadcast_in_dim %c, %s, dims = [0] : (tensor<512xf32>, "
            "tensor<1xi32>) -> tensor<?xf32>\n%0 = stablehlo.add %arg0, %b : tensor<?xf32>",
            "broadcast of a fixed-size array along the batch axis",
        ),
        (
            "slice of a fixed-size array to the batch size",
            "%b = stablehlo.real_dynamic_slice %c, %z, %s, %o : (tensor<512xf32>, tensor<1xi32>, "
            "tensor<1xi32>, tensor<1xi32>) -> tensor<?xf32>\n"
            "%0 = stablehlo.add %arg0, %b : tensor<?xf32>",
            "slice of the batch axis",
        ),
        (
            "iota of a fixed batch size",
            "%k = stablehlo.constant dense<[512, 2]> : tensor<2xi32>\n"
            "%i = stablehlo.dynamic_iota %k, dim = 1 : (tensor<2xi32>) -> tensor<?x2xf32>\n"
            "%0 = stablehlo.add %arg0, %arg1 : tensor<?xf32>",
            "iota of a batch size other than the input's",
        ),
        (
            "a reduction inside a loop body",
            "%w:2 = stablehlo.while(%i = %arg0, %acc = %f) : tensor<?xf32>, tensor<f32>\n"
            "cond {\n%t = stablehlo.constant dense<true> : tensor<i1>\n"
            "stablehlo.return %t : tensor<i1>\n} do {\n"
            "%r = stablehlo.reduce(%i init: %f) applies stablehlo.add across dimensions = [0] : "
            "(tensor<?xf32>, tensor<f32>) -> tensor<f32>\n"
            "stablehlo.return %i, %r : tensor<?xf32>, tensor<f32>\n}\n"
            "%0 = stablehlo.add %arg0, %arg1 : tensor<?xf32>",
            "reduction over the batch axis",
        ),
    ],
)
def test_a_forged_module_matching_rows_to_positions_is_refused(name, body, reason):
    text = MODULE.replace("BODY", body + "\n    return %0 : tensor<?xf32>")
    with pytest.raises(ArtifactRejected, match=reason):
        artifact.check_module(text)


def test_scalars_and_per_element_loops_pass_the_module_check():
    body = (
        "%lo = stablehlo.constant dense<0.8> : tensor<f32>\n"
        "%hi = stablehlo.constant dense<1.2> : tensor<f32>\n"
        "%0 = stablehlo.clamp %lo, %arg0, %hi : (tensor<f32>, tensor<?xf32>, tensor<f32>) -> "
        "tensor<?xf32>"
    )
    artifact.check_module(MODULE.replace("BODY", body + "\n    return %0 : tensor<?xf32>"))

    def newton(r, a):  # a loop carrying a scalar counter beside per-element values
        return jax.lax.fori_loop(0, 3, lambda i, x: 0.5 * (x + r / x), r) * a

    (n,) = jax_export.symbolic_shape("n")
    spec = jax.ShapeDtypeStruct((n,), jnp.float32)
    exported = jax_export.export(jax.jit(jax.vmap(newton)), platforms=["cpu"])(spec, spec)
    # the forward program only: the VJP of a loop stacks its residuals as (steps, n), which
    # the check refuses (a symbolic size off the first axis; a known limitation)
    artifact.check_module(exported.mlir_module())


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


def test_a_flatbuffer_whose_module_or_vjp_bytes_do_not_parse_is_refused():
    # deserialize reads only the flatbuffer; the StableHLO bytes are parsed later, and a
    # byte-flipped artifact raised JaxRuntimeError there, which was blamed on the evaluator
    ((name, blob),) = honest(DRIFT).items()
    exported = jax_export.deserialize(bytearray(blob))
    bad_module = dataclasses.replace(exported, mlir_module_serialized=b"garbage")
    with pytest.raises(ArtifactRejected, match="the artifact's module does not parse"):
        artifact.load_variants({name: bytes(bad_module.serialize(vjp_order=0))}, SIGNATURE, "cpu")
    vjp = dataclasses.replace(exported.vjp(), mlir_module_serialized=b"garbage")
    bad_vjp = dataclasses.replace(exported, _get_vjp=lambda _: vjp)
    with pytest.raises(ArtifactRejected, match="the artifact's VJP module does not parse"):
        artifact.load_variants({name: bytes(bad_vjp.serialize(vjp_order=1))}, SIGNATURE, "cpu")


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
