# PPO's clipped surrogate as a drift (mirror learning): the objective ratio*A - drift equals
# min(ratio*A, clip(ratio, 1-eps, 1+eps)*A), so with this drift the trainer is exactly PPO.
def drift(ratio, advantage, epsilon):
    clipped_ratio = jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)
    return jax.nn.relu((ratio - clipped_ratio) * advantage)
