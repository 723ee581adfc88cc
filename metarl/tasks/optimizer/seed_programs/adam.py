# Adam (Kingma & Ba, 2015) with PPO's eps=1e-5, written in the same operation order as
# optax.adam so that PPO with this rule reproduces PPO with optax.adam.
# state[0] holds the first moment, state[1] the second; step counts from 1.
def optimizer(grad, param, momentum, state, step, progress, lr):
    b1 = 0.9
    b2 = 0.999
    eps = 1e-5
    first = (1 - b1) * grad + b1 * state[0]
    second = (1 - b2) * (grad ** 2) + b2 * state[1]
    first_hat = first / (1 - b1 ** step)
    second_hat = second / (1 - b2 ** step)
    update = (first_hat / (jnp.sqrt(second_hat + 0.0) + eps)) * -lr
    new_state = state.at[0].set(first).at[1].set(second)
    return update, new_state
