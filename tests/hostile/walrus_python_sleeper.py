# task: drift
# attack: a walrus `(o := jax).version.subprocess` escapes the attribute-chain check; starts the tracer's own interpreter (`python -c 'import time; time.sleep(300)' metarl-hostile-sleeper-...`) in a new session with every fd closed
# contained: no process with the marker in its command line survives the evaluation; the candidate fails with its own report
# expect: fail
# expect-reason: hostile report
NAME = "metarl-hostile-sleeper-walrus_python_sleeper"


def drift(ratio, advantage, epsilon):
    subprocess = (o := jax).version.subprocess
    child = subprocess.Popen(
        [subprocess.sys.executable, "-c", "import time; time.sleep(300)", NAME],
        start_new_session=True, close_fds=True, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    subprocess.time.sleep(1.0)
    raise ValueError(f"hostile report: python sleeper pid {child.pid} alive={child.poll() is None}")
    return ratio
