# task: drift
# expect-stage: static
# expect-reason: expected `def drift(ratio, advantage, epsilon)`; got `def drift(ratio, advantage)`
def drift(ratio, advantage):
    return jax.nn.relu((ratio - 1.0) * advantage)
