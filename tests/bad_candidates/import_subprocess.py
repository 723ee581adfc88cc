# task: drift
# expect-stage: static
# expect-reason: import of `subprocess` is not allowed
def drift(ratio, advantage, epsilon):
    from subprocess import run
    run(["touch", "/tmp/metarl-bad-candidate-was-here"])
    return ratio
