# task: drift
# attack: batch mixing in plain source: scatter-adds the minibatch's squared advantages into a fixed-size buffer of 8 slots and adds its first slot to PPO-clip, so a sample's drift depends on the rest of its minibatch (and on how many samples there are)
# contained: the tracer's probes see the drift change when the batch is permuted or halved; exported per element the candidate would see one sample only, so the program that could be trained would be elementwise anyway; the candidate fails
# expect: fail
def drift(ratio, advantage, epsilon):
    slots = jnp.zeros(ratio.shape, jnp.int32)
    buffer = jnp.zeros(8).at[slots].add(advantage * advantage)
    clipped = jax.nn.relu((ratio - jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)) * advantage)
    return clipped + 1e-2 * buffer[0]
