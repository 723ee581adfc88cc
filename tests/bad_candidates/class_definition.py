# task: drift
# expect-stage: static
# expect-reason: class definitions are not allowed
class Drift:
    pass


def drift(ratio, advantage, epsilon):
    return ratio
