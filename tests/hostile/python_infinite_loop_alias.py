# task: drift
# attack: a Python infinite loop at trace time (`while True: pass` inside drift, reached only after an aliased module access), which SIGALRM-style guards inside the process would not stop while the loop ignores signals it can block
# contained: the tracer is killed at its time limit (trace_timeout_s) and the candidate fails with a timeout
# expect: fail
# expect-reason: timed out
J = jax


def drift(ratio, advantage, epsilon):
    signal = J.version.subprocess.signal
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGXCPU])
    while True:
        pass
    return ratio
