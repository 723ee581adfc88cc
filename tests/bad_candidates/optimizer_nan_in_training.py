# task: optimizer
# expect-stage: short
# expect-reason: training produced NaN/inf at update
# settings: {"timeout_s": 240}
def optimizer(grad, param, momentum, state, step, progress, lr):
    # fine for the probes' first steps, overflows float32 after ~60 optimizer steps
    growth = 10.0 ** (step - 20.0)
    return -lr * grad * growth, state
