# task: drift
# expect-stage: probes
# expect-reason: timed out after
# settings: {"timeout_s": 6}
# a constant that takes minutes of bignum arithmetic to compute, at definition time
HUGE = 7 ** 7 ** 9


def drift(ratio, advantage, epsilon):
    return jax.nn.relu((ratio - 1.0) * advantage)
