# task: drift
# attack: a multi-million-step Python loop at trace time that records one jax operation per step (a 3,000,000-equation program), to stall tracing, exporting or the trainer's compiler
# contained: the tracer stops it at its time (or memory) limit, or the oversized artifact is refused; the candidate fails
# expect: fail
def drift(ratio, advantage, epsilon):
    total = jax.nn.relu((ratio - jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)) * advantage)
    for step in range(3_000_000):
        total = total * 1.0000001
    return total
