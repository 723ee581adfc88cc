# task: drift
# expect-stage: static
# expect-reason: `jax.pure_callback` is not allowed
def drift(ratio, advantage, epsilon):
    return jax.pure_callback(lambda r: r, ratio, ratio)
