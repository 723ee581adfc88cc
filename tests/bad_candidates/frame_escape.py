# task: drift
# expect-stage: static
# expect-reason: `gi_frame` is not allowed
def drift(ratio, advantage, epsilon):
    generator = (x for x in [ratio])
    outer = generator.gi_frame.f_back.f_globals
    return ratio
