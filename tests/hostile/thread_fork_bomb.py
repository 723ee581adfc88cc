# task: drift
# attack: a thread and fork bomb through top-level attribute chains (`TH = J.version.subprocess.threading`): starts sleeping threads until the OS refuses (5000 asked), then `exec -a` renamed `sleep 300` sleepers until fork fails, to exhaust the host's PIDs (pid_max is 32768 on the CI VM) or to outlive the tracer
# contained: the worker's process limit (264 tasks on 2 cores: a pids cgroup per worker when the parent is root, RLIMIT_NPROC in its user namespace otherwise) stops both loops; nothing survives the evaluation; the candidate fails with its own report
# expect: fail
# expect-reason: hostile report
# run: alone
J = jax
OS = J.version.os
SP = J.version.subprocess
TH = J.version.subprocess.threading
TIME = J.version.subprocess.time
B = J.version.subprocess.builtins
NAME = "metarl-hostile-sleeper-thread_fork_bomb"


def threads():
    started = 0
    try:
        for _ in range(5000):
            TH.Thread(target=TIME.sleep, args=(300,), daemon=True).start()
            started = started + 1
    except B.RuntimeError as error:
        return f"{started} threads, then {error}"
    return f"all {started} threads"


def sleepers():
    started = 0
    try:
        for _ in range(5000):
            SP.Popen(
                ["bash", "-c", f"exec -a {NAME} sleep 300"], stdin=SP.DEVNULL,
                stdout=SP.DEVNULL, stderr=SP.DEVNULL, start_new_session=True,
            )
            started = started + 1
    except OS.error as error:
        return f"{started} sleepers, then {error.strerror}"
    return f"all {started} sleepers"


def drift(ratio, advantage, epsilon):
    raise ValueError(f"hostile report: {threads()}; {sleepers()}")
    return ratio
