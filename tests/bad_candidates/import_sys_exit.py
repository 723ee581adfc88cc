# task: drift
# expect-stage: static
# expect-reason: import of `sys` is not allowed
import sys


def drift(ratio, advantage, epsilon):
    sys.exit(0)
    return ratio
