# task: drift
# expect-stage: probes
# expect-reason: memory
def drift(ratio, advantage, epsilon):
    # sorting a 256 GB array: XLA has to materialise it
    ballast = jnp.sort(jnp.tile(ratio, 10 ** 9))
    return jax.nn.relu((ratio - 1.0) * advantage) + 0.0 * ballast[: ratio.shape[0]]
