# task: drift
# expect-stage: static
# expect-reason: name `clip_ratio` is not defined
def drift(ratio, advantage, epsilon):
    clipped = jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)
    return jax.nn.relu((ratio - clip_ratio) * advantage)
