# task: drift
# expect-stage: probes
# expect-reason: ConcretizationTypeError at line 6
def drift(ratio, advantage, epsilon):
    # converting a traced array to a Python number (what numpy would do)
    scale = float(jnp.max(ratio))
    return jax.nn.relu((ratio - 1.0) * advantage) * scale
