# task: drift
# expect-stage: probes
# expect-reason: ZeroDivisionError at line 4 (`SCALE = 1 / 0`) while defining the candidate
SCALE = 1 / 0


def drift(ratio, advantage, epsilon):
    return jax.nn.relu((ratio - 1.0) * advantage) * SCALE
