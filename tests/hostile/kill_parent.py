# task: drift
# attack: SIGKILLs its parent (os.kill(os.getppid(), 9)), the parent's process group and its grandparent, then reports what it saw
# contained: the test process (the evaluator) and the test's sacrificial sleep survive; the candidate fails
# expect: fail
# run: alone-last
J = jax
OS = J.version.os
B = J.version.subprocess.builtins


def parent_of(pid):
    for line in B.open(f"/proc/{pid}/status").read().splitlines():
        if line.startswith("PPid:"):
            return B.int(line.split()[1])
    return 0


def drift(ratio, advantage, epsilon):
    log = []
    parent = OS.getppid()
    grandparent = parent_of(parent)
    for what, thunk in (
        (f"kill parent {parent}", lambda: OS.kill(parent, 9)),
        (f"killpg of parent {parent}", lambda: OS.killpg(OS.getpgid(parent), 9)),
        (f"kill grandparent {grandparent}", lambda: OS.kill(grandparent, 9) if grandparent > 1 else None),
    ):
        try:
            thunk()
            log.append(what + ": sent")
        except OS.error as error:
            log.append(f"{what}: {error!r}")
    J.version.subprocess.time.sleep(1.0)
    raise ValueError("hostile report: " + "; ".join(log))
    return ratio
