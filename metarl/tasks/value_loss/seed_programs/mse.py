# Plain regression: half the squared error, no trust region on the critic (the old value and
# epsilon are ignored). What A2C and many PPO implementations without value clipping use.
def value_loss(value, old_value, target, epsilon):
    return 0.5 * jnp.square(value - target)
