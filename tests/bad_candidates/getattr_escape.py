# task: drift
# expect-stage: static
# expect-reason: `getattr` is not allowed
def drift(ratio, advantage, epsilon):
    builtins = getattr(jax, "_src")
    return ratio
