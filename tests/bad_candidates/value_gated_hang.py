# task: drift
# expect-stage: probes
# expect-reason: a reduction over the batch axis
def drift(ratio, advantage, epsilon):
    # PPO-clip, plus a loop of two billion steps whenever a ratio lies between 1e-6 and 5e-5
    # from 1: training reaches such ratios from its first gradient step on (~1% of them,
    # measured), the probes' random ratios almost never (6e-5 per sample), nor their finite
    # differences (steps of 1e-4 and 1e-3) or ratio == 1. A loop's
    # condition is one boolean for the whole call, so the trainer would spin on every batch
    # holding one such element; the exported, per-element program needs a reduction over the
    # batch axis for it, which the trainer's verification refuses before anything trains.
    near = jnp.abs(ratio - 1.0)
    gate = (near > 1e-6) & (near < 5e-5)
    count, spun = lax.while_loop(
        lambda state: jnp.any(gate) & (state[0] < 2000000000),
        lambda state: (state[0] + 1, jnp.sin(state[1]) + ratio),
        (0, ratio),
    )
    clipped = jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)
    return jax.nn.relu((ratio - clipped) * advantage) + 0.0 * lax.stop_gradient(spun)
