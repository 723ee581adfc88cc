# Plain stochastic gradient descent: step against the gradient, scaled by the (annealed)
# learning rate. It keeps no state. Under PPO's Adam-tuned learning rates it learns slowly;
# it is the floor any discovered optimizer should clear.
def optimizer(grad, param, momentum, state, step, progress, lr):
    return -lr * grad, state
