# task: drift
# expect-stage: probes
# expect-reason: drift is negative
def drift(ratio, advantage, epsilon):
    return (ratio - 1.0) * advantage
