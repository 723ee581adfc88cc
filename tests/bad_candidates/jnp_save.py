# task: drift
# expect-stage: static
# expect-reason: `jax.numpy.save` is not allowed
def drift(ratio, advantage, epsilon):
    jnp.save("/tmp/metarl-bad-candidate-was-here.npy", ratio)
    return jax.nn.relu((ratio - 1.0) * advantage)
