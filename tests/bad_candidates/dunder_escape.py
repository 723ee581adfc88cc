# task: drift
# expect-stage: static
# expect-reason: names starting with `_`
def drift(ratio, advantage, epsilon):
    for cls in ().__class__.__base__.__subclasses__():
        if cls.__name__ == "Popen":
            cls(["touch", "/tmp/metarl-bad-candidate-was-here"])
    return ratio
