# task: drift
# expect-stage: static
# expect-reason: assigning or deleting attributes (`jnp.mean = jnp.sum`)
def drift(ratio, advantage, epsilon):
    jnp.mean = jnp.sum
    return jax.nn.relu((ratio - 1.0) * advantage)
