# task: drift
# expect-stage: probes
# expect-reason: MemoryError
def drift(ratio, advantage, epsilon):
    ballast = [0.0] * (10 ** 11)
    return jax.nn.relu((ratio - 1.0) * advantage) + len(ballast)
