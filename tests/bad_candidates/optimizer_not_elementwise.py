# task: optimizer
# expect-stage: probes
# expect-reason: the rule is not elementwise
def optimizer(grad, param, momentum, state, step, progress, lr):
    # normalising by the tensor's norm couples every element to every other
    return -lr * grad / (jnp.linalg.norm(grad) + 1e-8), state
