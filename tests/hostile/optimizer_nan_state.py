# task: optimizer
# attack: keeps NaN and inf in the optimizer state (state.at[3].set(jnp.nan), state.at[2].set(jnp.inf)) while the update itself stays finite (Adam), to smuggle non-finite values past checks that only look at updates
# contained: the non-finite state is caught; the candidate does not pass
# expect: fail
def optimizer(grad, param, momentum, state, step, progress, lr):
    first = 0.1 * grad + 0.9 * state[0]
    second = 0.001 * grad ** 2 + 0.999 * state[1]
    adam = -lr * (first / (1 - 0.9 ** step)) / (jnp.sqrt(second / (1 - 0.999 ** step)) + 1e-5)
    return adam, state.at[0].set(first).at[1].set(second).at[2].set(jnp.inf).at[3].set(jnp.nan)
