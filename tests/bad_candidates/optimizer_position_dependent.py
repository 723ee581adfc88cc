# task: optimizer
# expect-stage: probes
# expect-reason: permuting the elements of the parameter
def optimizer(grad, param, momentum, state, step, progress, lr):
    scale = jnp.linspace(0.5, 1.5, grad.size).reshape(grad.shape)
    return -lr * grad * scale, state
