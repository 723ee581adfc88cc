# task: drift
# attack: reads /proc/self/environ, /proc/<ppid>/environ, /proc/1/environ and every /proc/*/environ it can see, and raises an exception whose message is the lot (secret-looking entries first), so that a leaked API key would appear in the Outcome's reason
# contained: no secret of the parent (canary) appears anywhere in the Outcome; the candidate fails
# expect: fail
# expect-reason: hostile report
J = jax
OS = J.version.os
INTERESTING = ("KEY", "TOKEN", "SECRET", "PASS", "AUTH", "CANARY", "HOSTILE", "METARL", "HOME")


def environs():
    found = {}
    names = ["self", f"{OS.getppid()}", "1"] + [n for n in OS.listdir("/proc") if n.isdigit()]
    for name in names:
        try:
            fd = OS.open(f"/proc/{name}/environ", OS.O_RDONLY)
            data = OS.read(fd, 1 << 20)
            OS.close(fd)
        except OS.error:
            continue
        for entry in data.split(b"\0"):
            if entry:
                found[entry.decode("utf-8", "replace")] = name
    return found


def drift(ratio, advantage, epsilon):
    found = environs()
    first = [f"[{pid}] {entry}" for entry, pid in found.items() if any(k in entry.upper() for k in INTERESTING)]
    rest = [f"[{pid}] {entry}" for entry, pid in found.items() if f"[{pid}] {entry}" not in first]
    raise ValueError(f"hostile report: {len(found)} variables; " + " | ".join(first + rest))
    return ratio
