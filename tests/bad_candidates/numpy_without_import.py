# task: drift
# expect-stage: static
# expect-reason: name `np` is not defined (numpy is not available: use jnp)
def drift(ratio, advantage, epsilon):
    return np.maximum((ratio - 1.0) * advantage, 0.0)
