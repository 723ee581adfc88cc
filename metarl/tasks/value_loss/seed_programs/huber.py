# The Huber loss with delta = 1: squared near the target, linear far from it, so a few large
# return targets (an early lucky episode) pull the critic with a bounded force.
def value_loss(value, old_value, target, epsilon):
    error = jnp.abs(value - target)
    return jnp.where(error <= 1.0, 0.5 * jnp.square(error), error - 0.5)
