# task: drift
# expect-stage: probes
# expect-reason: drift is not elementwise
def drift(ratio, advantage, epsilon):
    return (ratio - jnp.mean(ratio)) ** 2
