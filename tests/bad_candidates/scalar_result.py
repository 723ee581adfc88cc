# task: drift
# expect-stage: probes
# expect-reason: drift's result has shape () for ratio of shape (64,); expected exactly (64,)
def drift(ratio, advantage, epsilon):
    return jnp.mean(jax.nn.relu((ratio - 1.0) * advantage))
