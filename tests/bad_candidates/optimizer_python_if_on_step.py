# task: optimizer
# expect-stage: probes
# expect-reason: TracerBoolConversionError at line 6 (`if step < 10:`)
def optimizer(grad, param, momentum, state, step, progress, lr):
    # step is a traced int32 in training: warm-up must use jnp.where
    if step < 10:
        return -0.1 * lr * grad, state
    return -lr * grad, state
