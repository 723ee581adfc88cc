# task: drift
# expect-stage: probes
# expect-reason: TracerBoolConversionError at line 7 (`if ratio.mean() > 1.0:`)
def drift(ratio, advantage, epsilon):
    penalty = jax.nn.relu((ratio - 1.0) * advantage)
    # Python `if` on a traced value: fine eagerly, fails under jit
    if ratio.mean() > 1.0:
        return penalty
    return 0.5 * penalty
