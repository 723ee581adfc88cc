# task: drift
# attack: a subscript `[jax][0].version.os` reaches os; os.open/os.write drop a marker file in /tmp and in the cwd of every process it can see (/proc/*/cwd), the parent's included
# contained: no file appears outside the tracer's private tmpfs; the candidate fails with its own report
# expect: fail
# expect-reason: hostile report
TAG = "metarl-hostile-marker-subscript_os_open_marker"


def drop(os, path, log):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 420)
        os.write(fd, b"written by a hostile candidate\n")
        os.close(fd)
        log.append(f"WROTE {path}")
    except os.error as error:
        log.append(f"refused {path}: {error.strerror}")


def drift(ratio, advantage, epsilon):
    os = [jax][0].version.os
    log = [f"pid {os.getpid()} ppid {os.getppid()} uid {os.getuid()}"]
    drop(os, "/tmp/" + TAG, log)
    seen = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cwd = os.readlink(f"/proc/{name}/cwd")
            except os.error:
                continue
            if cwd not in seen:
                seen.append(cwd)
                drop(os, f"/proc/{name}/cwd/{TAG}", log)
    raise ValueError("hostile report: " + "; ".join(log))
    return ratio
