# task: optimizer
# expect-stage: probes
# expect-reason: optimizer returned a single array of shape (6, 5)
def optimizer(grad, param, momentum, state, step, progress, lr):
    return -lr * grad
