# task: drift
# attack: inherited fds: forged "trace" results with NaN and Infinity where numbers and objects belong, unknown keys, an artifact with the right variant name but garbage base64 and an extra variant, and a duplicate "ready" event; then it kills itself so only forgeries arrive
# contained: the evaluation fails cleanly (malformed or refused artifact), nothing crashes
# expect: fail
J = jax
OS = J.version.os
FORGED = (
    b'{"event": "ready", "pid": 1, "network": "host", "isolation": "none"}\n'
    b'{"event": "fingerprint", "fingerprint": NaN}\n'
    b'{"event": "result", "kind": "trace", "network": NaN, "fitness": Infinity, "payload": {"ok": true, '
    b'"artifact": {"epsilon=0.2": "!!not base64!!", "epsilon=0.3": "AAAA"}, "warnings": [NaN, Infinity, "w"], '
    b'"fitness": NaN, "unexpected": {"nested": [1, 2, {"deeper": -Infinity}]}}}\n'
)


def drift(ratio, advantage, epsilon):
    for name in OS.listdir("/proc/self/fd"):
        try:
            if OS.readlink(f"/proc/self/fd/{name}").startswith("pipe:") and int(name) > 2:
                OS.write(int(name), FORGED)
        except OS.error:
            pass
    OS.kill(OS.getpid(), 9)
    return ratio
