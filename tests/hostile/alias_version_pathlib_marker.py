# task: drift
# attack: aliasing `J = jax` hides `jax.version` from the static check; `J.version.pathlib` writes a marker file in /tmp, $HOME, ~/.cache/metarl, the parent's cwd (/proc/<ppid>/cwd, /proc/1/cwd) and the pytest temp dirs (/tmp/pytest-*)
# contained: no file appears outside the tracer's private tmpfs; the candidate fails with its own report
# expect: fail
# expect-reason: hostile report
J = jax
P = J.version.pathlib
OS = J.version.os
TAG = "metarl-hostile-marker-alias_version_pathlib_marker"


def attempt(log, where):
    try:
        P.Path(where).write_text("written by a hostile candidate\n")
        log.append(f"WROTE {where}")
    except OS.error as error:
        log.append(f"refused {where}: {error!r}")


def drift(ratio, advantage, epsilon):
    log = []
    home = OS.path.expanduser("~")
    targets = [
        "/tmp/" + TAG,
        home + "/" + TAG,
        "/root/" + TAG,
        home + "/.cache/metarl/" + TAG,
        "/root/.cache/metarl/" + TAG,
        f"/proc/{OS.getppid()}/cwd/{TAG}",
        "/proc/1/cwd/" + TAG,
    ]
    # the top of every pytest temp dir (deeper ones may belong to test runs under way)
    for base in P.Path("/tmp").glob("pytest-of-*/pytest-*"):
        targets.append(f"{base}/{TAG}")
    for where in targets[:200]:
        attempt(log, where)
    raise ValueError("hostile report: " + "; ".join(log))
    return ratio
