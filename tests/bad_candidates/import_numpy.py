# task: drift
# expect-stage: static
# expect-reason: import of `numpy` is not allowed
import numpy as np


def drift(ratio, advantage, epsilon):
    return np.maximum((ratio - 1.0) * advantage, 0.0)
