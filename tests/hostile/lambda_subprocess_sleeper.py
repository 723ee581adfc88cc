# task: drift
# attack: a lambda `(lambda m: m.version.subprocess)(jax)` reaches subprocess; starts `sleep 300` renamed metarl-hostile-sleeper-... with `bash -c 'exec -a NAME sleep 300'` and a `python -c` sleeper with a marker argument, both in the tracer's own process group
# contained: no process with the marker in its command line survives the evaluation; the candidate fails with its own report
# expect: fail
# expect-reason: hostile report
NAME = "metarl-hostile-sleeper-lambda_subprocess_sleeper"


def drift(ratio, advantage, epsilon):
    subprocess = (lambda m: m.version.subprocess)(jax)
    sys = subprocess.sys
    quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = []
    for argv in (
        ["bash", "-c", f"exec -a {NAME} sleep 300"],
        [sys.executable, "-c", "import time; time.sleep(300)", NAME],
    ):
        try:
            log.append(f"started pid {subprocess.Popen(argv, **quiet).pid}: {argv[0]}")
        except subprocess.builtins.OSError as error:
            log.append(f"refused {argv[0]}: {error!r}")
    subprocess.time.sleep(0.5)
    raise ValueError("hostile report: " + "; ".join(log))
    return ratio
