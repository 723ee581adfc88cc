# task: drift
# expect-stage: static
# expect-reason: `global` statements are not allowed
CALLS = 0


def drift(ratio, advantage, epsilon):
    global CALLS
    CALLS = CALLS + 1
    return jax.nn.relu((ratio - 1.0) * advantage)
