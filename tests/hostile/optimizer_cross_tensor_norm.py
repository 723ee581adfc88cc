# task: optimizer
# attack: a cross-tensor statistic smuggled through a module-level list: every call appends the squared norm of its gradient, and the update is normalised by the global norm of the last few tensors seen (a non-elementwise rule that the elementwise contract forbids)
# contained: the exported per-element rule cannot see other tensors (leaked tracers fail, or the statistic is a constant); the candidate fails or scores honestly
# expect: honest
NORMS = []


def optimizer(grad, param, momentum, state, step, progress, lr):
    NORMS.append(jnp.sum(grad * grad))
    total = 0.0
    for value in NORMS[-8:]:
        total = total + value
    first = 0.1 * grad + 0.9 * state[0]
    second = 0.001 * grad ** 2 + 0.999 * state[1]
    adam = -lr * (first / (1 - 0.9 ** step)) / (jnp.sqrt(second / (1 - 0.999 ** step)) + 1e-5)
    return adam / (1.0 + jnp.sqrt(total)), state.at[0].set(first).at[1].set(second)
