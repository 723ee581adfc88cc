# task: drift
# attack: random numbers in plain source: adds lax.rng_uniform noise (a stablehlo random-number op, not a counter-based jax.random key) to PPO-clip, too small (1e-7) for the probes' tolerances, so the drift the probes measure is not the one training sees
# contained: the exported program holds a random-number op, which the module check refuses (in the tracer's own check, and in the trainer's); the candidate fails
# expect: fail
# expect-reason: stablehlo.rng is not allowed
def drift(ratio, advantage, epsilon):
    clipped = jax.nn.relu((ratio - jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)) * advantage)
    return clipped + 1e-7 * lax.rng_uniform(0.0, 1.0, jnp.shape(ratio))
