# task: drift
# expect-stage: static
# expect-reason: `eval` is not allowed
def drift(ratio, advantage, epsilon):
    return eval("jax.nn.relu((ratio - 1.0) * advantage)")
