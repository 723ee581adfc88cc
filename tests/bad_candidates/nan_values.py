# task: drift
# expect-stage: probes
# expect-reason: drift returned nan
def drift(ratio, advantage, epsilon):
    # log of a negative number below ratio = 1
    return jax.nn.relu(jnp.log(ratio - 1.0) * advantage)
