# task: drift
# expect-stage: static
# expect-reason: top-level statement `while True:` is not allowed
while True:
    pass


def drift(ratio, advantage, epsilon):
    return ratio
