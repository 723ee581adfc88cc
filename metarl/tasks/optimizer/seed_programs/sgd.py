# Stochastic gradient descent: step against the gradient. Learning rates in the configs are
# tuned for Adam, whose steps are normalised; raw PPO gradients (clipped to global norm 0.5)
# are much smaller, so plain SGD takes 400 times the given rate. (learn-rl-algorithms tuned
# SGD on MinAtar at 50-170x Adam's rate; on CartPole at 1e5 steps, 400x matched Adam here.)
def optimizer(grad, param, momentum, state, step, progress, lr):
    return -400.0 * lr * grad, state
