# task: drift
# expect-stage: probes
# expect-reason: the gradient of drift with respect to ratio is inf
def drift(ratio, advantage, epsilon):
    # finite everywhere, but sqrt has an infinite slope at ratio = 1
    return jnp.sqrt(jnp.abs(ratio - 1.0)) * jnp.abs(advantage)
