# task: drift
# expect-stage: static
# expect-reason: `jax.config` is not allowed
def drift(ratio, advantage, epsilon):
    jax.config.update("jax_enable_x64", True)
    return jax.nn.relu((ratio - 1.0) * advantage)
