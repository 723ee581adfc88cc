# task: drift
# expect-stage: static
# expect-reason: must define a top-level function `drift(ratio, advantage, epsilon)`
def drift_term(ratio, advantage, epsilon):
    return jax.nn.relu((ratio - 1.0) * advantage)
