# task: drift
# expect-stage: probes
# expect-reason: MB of output
# settings: {"max_file_mb": 4}
def drift(ratio, advantage, epsilon):
    print("spam " * 2_000_000)
    return jax.nn.relu((ratio - 1.0) * advantage)
