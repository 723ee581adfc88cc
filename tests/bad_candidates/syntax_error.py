# task: drift
# expect-stage: static
# expect-reason: SyntaxError
def drift(ratio, advantage, epsilon):
    return jnp.maximum(ratio - 1.0, 0.0 * advantage
