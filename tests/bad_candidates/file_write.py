# task: drift
# expect-stage: static
# expect-reason: `open` is not allowed
def drift(ratio, advantage, epsilon):
    handle = open("/tmp/metarl-bad-candidate-was-here", "w")
    handle.write("pwned")
    return jax.nn.relu((ratio - 1.0) * advantage)
