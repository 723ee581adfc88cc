# task: drift
# expect-stage: static
# expect-reason: assigning to attributes or items (`jnp.tanh = None`) is not allowed
jnp.tanh = None


def drift(ratio, advantage, epsilon):
    return jax.nn.relu((ratio - 1.0) * advantage)
