# task: drift
# expect-stage: probes
# expect-reason: timed out after
# settings: {"timeout_s": 6}
def drift(ratio, advantage, epsilon):
    steps = 0
    while True:
        steps = steps + 1
    return ratio
