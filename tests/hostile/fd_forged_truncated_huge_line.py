# task: drift
# attack: inherited fds: a truncated JSON line, then a 64 MB single-line "result" whose reason is 64 MB of text (memory and quadratic-parsing pressure on the parent), then an unterminated line, then kills itself
# contained: the evaluation ends within its time limit with a failure and a bounded reason
# expect: fail
J = jax
OS = J.version.os


def drift(ratio, advantage, epsilon):
    huge = b'{"event": "result", "kind": "trace", "payload": {"ok": false, "reason": "' + b"A" * (64 << 20) + b'"}}\n'
    fds = []
    for name in OS.listdir("/proc/self/fd"):
        try:
            if OS.readlink(f"/proc/self/fd/{name}").startswith("pipe:") and int(name) > 2:
                fds.append(int(name))
        except OS.error:
            pass
    for fd in fds:
        try:
            OS.write(fd, b'{"event": "result", "kind": "trace", "payload": {"ok": tr\n')
            OS.write(fd, huge)
            OS.write(fd, b'{"event": "result", "kind": "trace"')
        except OS.error:
            pass
    OS.kill(OS.getpid(), 9)
    return ratio
