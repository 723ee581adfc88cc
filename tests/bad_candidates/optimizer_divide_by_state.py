# task: optimizer
# expect-stage: probes
# expect-reason: became nan/inf at step 1
def optimizer(grad, param, momentum, state, step, progress, lr):
    # state starts at zeros: dividing by it is inf at the first step
    return -lr * grad / state[1], state.at[1].set(state[1] + grad ** 2)
