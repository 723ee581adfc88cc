# task: drift
# attack: top-level "constant" assignments may be attribute chains (`OS = J.version.os`, `TH = J.version.subprocess.threading`); a background thread keeps writing numbered marker files in /tmp and in the parent's cwd every 50 ms, hoping to outlive the call that started it
# contained: no marker file outside the tracer, during or after the evaluation; the candidate fails with its own report
# expect: fail
# expect-reason: hostile report
J = jax
OS = J.version.os
TH = J.version.subprocess.threading
TIME = J.version.subprocess.time
TAG = "metarl-hostile-marker-toplevel_chain_thread"
COUNT = [0]


def scribble():
    while True:
        COUNT[0] = COUNT[0] + 1
        for folder in ("/tmp", f"/proc/{OS.getppid()}/cwd"):
            try:
                fd = OS.open(f"{folder}/{TAG}-{COUNT[0]}", OS.O_WRONLY | OS.O_CREAT, 420)
                OS.close(fd)
            except OS.error:
                pass
        TIME.sleep(0.05)


def drift(ratio, advantage, epsilon):
    TH.Thread(target=scribble, daemon=True).start()
    TIME.sleep(1.0)
    raise ValueError(f"hostile report: the thread wrote {COUNT[0]} rounds of markers")
    return ratio
