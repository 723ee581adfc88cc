# task: drift
# attack: connects to unix sockets outside the sandbox: the abstract name and the filesystem path the test's listeners advertise (METARL_HOSTILE_ABSTRACT / METARL_HOSTILE_UNIX in /proc/*/environ), every abstract or filesystem socket in /proc/net/unix whose name mentions metarl, sending a tagged message
# contained: no listener of the test receives a connection; the candidate fails with its own report
# expect: fail
# expect-reason: hostile report
J = jax
OS = J.version.os
P = J.version.pathlib
B = J.version.subprocess.builtins
TAG = b"metarl-hostile-marker-unix_socket_connect"


def targets():
    found = ["\0metarl-hostile-listener"]
    for name in [n for n in OS.listdir("/proc") if n.isdigit()]:
        try:
            entries = P.Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OS.error:
            continue
        for e in entries:
            if e.startswith(b"METARL_HOSTILE_UNIX="):
                found.append(e.split(b"=", 1)[1].decode())
            if e.startswith(b"METARL_HOSTILE_ABSTRACT="):
                found.append("\0" + e.split(b"=", 1)[1].decode())
    try:
        for line in P.Path("/proc/net/unix").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 8 and "metarl" in fields[7]:
                found.append(fields[7].replace("@", "\0", 1) if fields[7].startswith("@") else fields[7])
    except OS.error:
        pass
    return [t for i, t in enumerate(found) if t not in found[:i]]


def drift(ratio, advantage, epsilon):
    socket = B.getattr(B, "_" + "_import_" + "_")("socket")
    log = []
    for target in targets():
        try:
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.settimeout(1)
            connection.connect(target)
            connection.sendall(TAG + b"\n")
            connection.close()
            log.append(f"CONNECTED {target!r}")
        except OS.error as error:
            log.append(f"{target!r}: {error!r}")
    raise ValueError("hostile report: " + "; ".join(log))
    return ratio
