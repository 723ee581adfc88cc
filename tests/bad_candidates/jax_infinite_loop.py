# task: drift
# expect-stage: probes
# expect-reason: timed out after
# settings: {"timeout_s": 6}
def drift(ratio, advantage, epsilon):
    # a lax.while_loop whose condition never becomes false: XLA spins, SIGALRM cannot stop it
    never = lax.while_loop(lambda x: jnp.all(x > -1.0), lambda x: x + 1.0, ratio)
    return jax.nn.relu((ratio - 1.0) * advantage) + 0.0 * never
