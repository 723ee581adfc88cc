# task: drift
# expect-stage: probes
# expect-reason: drift's result has dtype bool for ratio of shape (64,); expected float32
def drift(ratio, advantage, epsilon):
    return (ratio - 1.0) * advantage > 0.0
