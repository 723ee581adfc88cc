# task: drift
# expect-stage: static
# expect-reason: `format` is not allowed
def drift(ratio, advantage, epsilon):
    leak = "{0.real}".format(ratio)
    return jax.nn.relu((ratio - 1.0) * advantage)
