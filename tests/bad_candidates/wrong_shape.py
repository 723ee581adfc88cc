# task: drift
# expect-stage: probes
# expect-reason: drift's result has shape (64, 64) for ratio of shape (64,); expected exactly (64,)
def drift(ratio, advantage, epsilon):
    # broadcasting a column against a row silently builds a matrix
    return jax.nn.relu((ratio[:, None] - 1.0) * advantage)
