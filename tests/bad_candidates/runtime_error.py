# task: drift
# expect-stage: probes
# expect-reason: TypeError at line 6
def drift(ratio, advantage, epsilon):
    clipped = jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)
    return jax.nn.relu((ratio - clipped) * advantage) + "0"
