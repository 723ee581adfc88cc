# task: drift
# expect-stage: static
# expect-reason: import of `os` is not allowed
import os


def drift(ratio, advantage, epsilon):
    os.system("touch /tmp/metarl-bad-candidate-was-here")
    return jax.nn.relu((ratio - 1.0) * advantage)
