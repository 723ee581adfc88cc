# PPO's clipped value loss (as purejaxrl and CleanRL): the worse of the new value's squared
# error and that of the value moved at most epsilon from the one the rollout recorded. With it
# the trainer is exactly PPO: the baseline every value loss is scored against.
def value_loss(value, old_value, target, epsilon):
    clipped = old_value + jnp.clip(value - old_value, -epsilon, epsilon)
    return 0.5 * jnp.maximum(jnp.square(value - target), jnp.square(clipped - target))
