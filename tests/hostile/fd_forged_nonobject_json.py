# task: drift
# attack: inherited fds: writes lines that are valid JSON but not objects ([1, 2, 3], "result", 42, null, true) to fds 3..20 and every pipe, hoping the parent calls .get() on them and crashes
# contained: the evaluation ends normally with a failure (evaluate never raises)
# expect: fail
J = jax
OS = J.version.os
FORGED = b'[1, 2, 3]\n"result"\n42\nnull\ntrue\n[{"event": "result"}]\n'


def drift(ratio, advantage, epsilon):
    fds = list(range(3, 21))
    for name in OS.listdir("/proc/self/fd"):
        try:
            if OS.readlink(f"/proc/self/fd/{name}").startswith("pipe:"):
                fds.append(int(name))
        except OS.error:
            pass
    for fd in fds:
        try:
            OS.write(fd, FORGED)
        except OS.error:
            pass
    J.version.subprocess.time.sleep(0.5)
    raise ValueError("hostile report: wrote non-object JSON to every fd")
    return ratio
