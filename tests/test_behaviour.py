"""The trainer's behavioural checks of an artifact (rl/verifier/behaviour.py, tasks/behaviour.py).

A compromised tracer sends any artifact, so these tests forge them the way such a tracer would
(exported directly over the symbolic (n,) batch, not from a per-element function) and check
that a program whose rows depend on their batch, only at the trainer's call size, or whose
VJP is keyed on the cotangent's magnitude is refused; and that every honest program (the seed
programs, an LPO network, an OPEN-lite rule) passes, for several probe seeds.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export as jax_export

from metarl.blackbox.export import lpo_source
from metarl.blackbox.open_lite import init_params as open_lite_params
from metarl.blackbox.open_lite import open_lite_source
from metarl.evaluation import stages
from metarl.evaluation.outcome import Outcome
from metarl.evaluation.settings import CascadeSettings, plan_runs
from metarl.rl.lpo import init_params as lpo_params
from metarl.rl.trainers import make_trainer
from metarl.rl.verifier import artifact
from metarl.rl.verifier.artifact import ArtifactRejected, Variant
from metarl.rl.verifier.behaviour import BehaviourRejected, check_independent, check_variants
from metarl.tasks import behaviour, get_task
from metarl.tasks.behaviour import check_artifact, example_rows, training_sizes
from metarl.tasks.candidate import load_function

DRIFT = get_task("drift")
OPTIMIZER = get_task("optimizer")
SEEDS = [11, 29]  # two training seeds (values do not matter, only how many)
SETTINGS = CascadeSettings(suite="smoke", seeds=len(SEEDS), seed_values=SEEDS)
CONFIGS = [entry.config for entry in plan_runs(SETTINGS)]
TRAINING_SIZE = CONFIGS[0].minibatch_size * len(SEEDS)  # the drift's flat call size: 256
PPO_SOURCE = DRIFT.seed_program("ppo_clip").source
ADAM_SOURCE = OPTIMIZER.seed_program("adam").source
HONEST = {
    f"{t.name}-{s.name}": (t, s.source) for t in (DRIFT, OPTIMIZER) for s in t.seed_programs()
}
HONEST["drift-lpo-network"] = (
    DRIFT,
    lpo_source(jax.tree.map(lambda x: 3.0 * x, lpo_params(jax.random.PRNGKey(1)))),
)
HONEST["optimizer-open-lite"] = (
    OPTIMIZER,
    open_lite_source(open_lite_params(jax.random.PRNGKey(2))),
)


def exported_variants(task, source):
    function = load_function(source, task.function_name)
    blobs = artifact.export_variants(task.per_element(function), task.element_signature, "cpu")
    return artifact.load_exported(blobs, task.element_signature, "cpu")


def forged(function):
    """What a compromised tracer could send: `function` exported on whole (n,) arrays."""
    (n,) = jax_export.symbolic_shape("n")
    spec = jax.ShapeDtypeStruct((n,), jnp.float32)
    return jax_export.export(jax.jit(function), platforms=["cpu"])(spec, spec)


def ppo_clip(ratio, advantage):
    return jax.nn.relu((ratio - jnp.clip(ratio, 0.8, 1.2)) * advantage)


def unverified(exported):
    """A drift Variant built without the structural check: the behaviour layer alone."""
    return {"epsilon=0.2": Variant(exported, exported.vjp())}


def test_the_call_sizes_are_read_off_the_training_program():
    drift = training_sizes(DRIFT, exported_variants(DRIFT, PPO_SOURCE), CONFIGS, SEEDS)
    assert drift == {
        ("epsilon=0.2", "forward"): (TRAINING_SIZE,),
        ("epsilon=0.2", "vjp"): (TRAINING_SIZE,),
    }
    rule = training_sizes(OPTIMIZER, exported_variants(OPTIMIZER, ADAM_SOURCE), CONFIGS, SEEDS)
    runner = jax.eval_shape(make_trainer(CONFIGS[0]).init, jax.random.PRNGKey(0))
    leaves = {math.prod(leaf.shape) * len(SEEDS) for leaf in jax.tree.leaves(runner.params)}
    assert rule == {("rule", "forward"): tuple(sorted(leaves))}


@pytest.mark.parametrize("task, source", list(HONEST.values()), ids=list(HONEST))
@pytest.mark.parametrize("probe_seed", [0, 1, 2])
def test_honest_artifacts_are_per_sample_at_the_training_sizes(task, source, probe_seed):
    check_artifact(task, exported_variants(task, source), CONFIGS, SEEDS, probe_seed)


def size_keyed(ratio, advantage):
    """PPO-clip, except at the trainer's call size, where the gradient's sign flips."""
    size = jnp.asarray(ratio.shape[0], jnp.float32)
    return jnp.where(size == TRAINING_SIZE, -ppo_clip(ratio, advantage), ppo_clip(ratio, advantage))


def test_an_artifact_diverging_only_at_the_training_size_is_refused_by_both_layers():
    exported = forged(size_keyed)
    with pytest.raises(ArtifactRejected, match="size of the batch"):
        artifact.verify(exported, DRIFT.element_signature, "cpu")
    variants = unverified(exported)
    sizes = training_sizes(DRIFT, variants, CONFIGS, SEEDS)
    examples = example_rows(DRIFT)
    for probe_seed in range(3):
        with pytest.raises(BehaviourRejected, match=f"in a batch of {TRAINING_SIZE}"):
            check_variants(variants, DRIFT.element_signature, sizes, examples, probe_seed)
    # at any other size it is PPO-clip: only the trainer's own size catches it
    other = {role: (TRAINING_SIZE + 1,) for role in sizes}
    check_variants(variants, DRIFT.element_signature, other, examples, 0, [1 / 128])


def test_an_artifact_failing_only_at_the_training_size_is_refused_before_training():
    # a shape-polymorphic trick: the symbolic size is constrained to the probes' sizes
    (n,) = jax_export.symbolic_shape("n", constraints=(f"n <= {TRAINING_SIZE - 1}",))
    spec = jax.ShapeDtypeStruct((n,), jnp.float32)
    exported = jax_export.export(jax.jit(ppo_clip), platforms=["cpu"])(spec, spec)
    with pytest.raises(ArtifactRejected, match="size of the batch"):
        artifact.verify(exported, DRIFT.element_signature, "cpu")
    variants = unverified(exported)
    sizes = training_sizes(DRIFT, variants, CONFIGS, SEEDS)
    with pytest.raises(BehaviourRejected, match=f"fails in a batch of {TRAINING_SIZE}"):
        check_variants(variants, DRIFT.element_signature, sizes, example_rows(DRIFT), 0)


@pytest.mark.parametrize(
    "name, function",
    [
        ("batch mean", lambda r, a: ppo_clip(r, a) + 1e-2 * jnp.mean(jnp.abs(a))),
        ("first row", lambda r, a: ppo_clip(r, a) * (1.0 + 1e-2 * r[0])),
        ("positions", lambda r, a: ppo_clip(r, a) * (1.0 + 1e-3 * jnp.arange(r.shape[0]))),
        ("neighbour", lambda r, a: ppo_clip(r, a) + 1e-2 * jnp.roll(a, 1) ** 2),
    ],
)
def test_rows_depending_on_their_batch_are_refused_by_behaviour_alone(name, function):
    variants = unverified(forged(function))
    sizes = training_sizes(DRIFT, variants, CONFIGS, SEEDS)
    with pytest.raises(BehaviourRejected, match="not a per-sample program"):
        check_variants(variants, DRIFT.element_signature, sizes, example_rows(DRIFT), 0)


@jax.custom_vjp
def cotangent_keyed(ratio, advantage):
    return ppo_clip(ratio, advantage)


def _keyed_fwd(ratio, advantage):
    return ppo_clip(ratio, advantage), (ratio, advantage)


def _keyed_bwd(residual, cotangent):
    """PPO-clip's gradient for the probes' cotangent of 1, its opposite for training's 1/M."""
    _, pullback = jax.vjp(ppo_clip, *residual)
    d_ratio, d_advantage = pullback(cotangent)
    return jnp.where(jnp.abs(cotangent) < 0.5, -d_ratio, d_ratio), d_advantage


cotangent_keyed.defvjp(_keyed_fwd, _keyed_bwd)


def encoded(exported):
    return artifact.encode({"epsilon=0.2": bytes(exported.serialize(vjp_order=1))})


def prepare(encoded_artifact, probe_seed=0):
    return stages._prepare(
        DRIFT, 0, encoded_artifact, probe_seed, "cpu", {}, stages.ignore, settings=SETTINGS
    )


def test_a_vjp_keyed_on_the_cotangent_passes_the_probes_but_is_refused():
    exported = forged(cotangent_keyed)
    variants = artifact.load_exported(
        artifact.decode(encoded(exported), {"epsilon=0.2"}), DRIFT.element_signature, "cpu"
    )
    function = DRIFT.assemble(artifact.callables(variants, DRIFT.element_signature))
    assert DRIFT.probes(function, 0).ok  # the probes differentiate with a cotangent of 1
    prepared = prepare(encoded(exported))
    assert isinstance(prepared, Outcome)
    assert "not linear in its cotangent" in prepared.reason, prepared.reason


def test_a_forged_gradient_is_refused_by_the_trainers_probes():
    def forged_gradient(ratio, advantage):  # PPO-clip's values, the opposite gradient
        values = ppo_clip(ratio, advantage)
        return values + (ratio - jax.lax.stop_gradient(ratio)) * (-2.0 * advantage)

    prepared = prepare(encoded(forged(forged_gradient)))
    assert isinstance(prepared, Outcome)
    assert "failed the probes" in prepared.reason
    assert "is not the slope of its values" in prepared.reason, prepared.reason


def test_an_honest_artifact_is_prepared_with_the_checks_timed():
    blobs = artifact.export_variants(
        DRIFT.per_element(load_function(PPO_SOURCE, "drift")), DRIFT.element_signature, "cpu"
    )
    prepared = prepare(artifact.encode(blobs))
    assert not isinstance(prepared, Outcome), prepared.reason
    assert {"load_artifact", "probes", "behaviour"} <= set(prepared.outcome.timings)
    ratio = jnp.asarray(np.linspace(0.5, 2.0, 16), jnp.float32)
    advantage = jnp.asarray(np.linspace(-2.0, 2.0, 16), jnp.float32)
    expected = load_function(PPO_SOURCE, "drift")(ratio, advantage, 0.2)
    np.testing.assert_array_equal(prepared.function(ratio, advantage, 0.2), expected)


def _batch_dependent(delta: float):
    """A stand-in program whose two outputs shift by `delta` with its batch's size: how a
    sum of cancelling terms rounds differently at another size, or how a batch leak looks."""

    def call(ratio, advantage):
        shift = delta * (len(ratio) > 64)  # only in the trainer-sized batches
        return ratio + shift, advantage + shift

    return call


@pytest.mark.parametrize(
    ("delta", "gradient", "refused"),
    [
        (5e-5, True, False),  # a gradient's rounding in units of its terms (scale ~1.2)
        (5e-5, False, True),  # the same shift in a forward value: refused
        (1e-3, True, True),  # beyond 1e-4 of the gradient's scale: a batch dependence
    ],
)
def test_a_vjp_may_round_in_units_of_its_scale_and_no_more(delta, gradient, refused):
    rng = np.random.default_rng(0)
    tracked = [rng.uniform(0.5, 1.5, 64).astype(np.float32) for _ in range(2)]
    fillers = [rng.uniform(0.5, 1.5, 256).astype(np.float32) for _ in range(2)]
    call = _batch_dependent(delta)
    if refused:
        with pytest.raises(BehaviourRejected, match="not a per-sample program"):
            check_independent(call, tracked, fillers, [256], rng, "program", gradient=gradient)
    else:
        check_independent(call, tracked, fillers, [256], rng, "program", gradient=gradient)


def test_call_sizes_from_the_parent_are_used_instead_of_tracing(monkeypatch):
    config = CONFIGS[0].replace(num_minibatches=CONFIGS[0].num_minibatches * 2)  # not traced yet
    sizes = [["epsilon=0.2", "forward", [64]], ["epsilon=0.2", "vjp", [64]]]
    behaviour.remember_sizes(DRIFT, config, len(SEEDS), sizes)

    def no_trace(*args, **kwargs):
        raise AssertionError("traced although the parent gave the sizes")

    monkeypatch.setattr(behaviour, "training_call_sizes", no_trace)
    variants = exported_variants(DRIFT, PPO_SOURCE)
    got = training_sizes(DRIFT, variants, [config], SEEDS)
    assert got == {("epsilon=0.2", "forward"): (64,), ("epsilon=0.2", "vjp"): (64,)}
    assert behaviour.traced_sizes(DRIFT, config, len(SEEDS)) == sizes
    assert behaviour.traced_sizes(DRIFT, config, len(SEEDS) + 1) is None
