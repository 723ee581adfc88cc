# task: optimizer
# expect-stage: probes
# expect-reason: new_state has shape (6, 5) for a parameter of shape (6, 5); expected exactly (4, 6, 5)
def optimizer(grad, param, momentum, state, step, progress, lr):
    first = 0.9 * state[0] + 0.1 * grad
    return -lr * first, first
