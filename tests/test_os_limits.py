"""The OS limits of a sandboxed worker: every writable mount capped, a process and thread limit,
device nodes only where they belong, artifacts parsed first in a throwaway worker, and a
compilation cache that a crashed trainer cannot touch (isolation.py, os_limits.py,
artifact_precheck.py, xla_cache.py)."""

from __future__ import annotations

import ast
import base64
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from metarl.evaluation import isolation, os_limits, sandbox
from metarl.evaluation.artifact_precheck import CRASH, artifact_digest
from metarl.evaluation.cascade import CascadeSettings, Evaluator
from metarl.evaluation.sandbox import SandboxLimits, WorkerProcess, process_group_alive
from metarl.tasks import get_task

SETTINGS = dict(
    suite="smoke",
    seeds=1,
    seed_values=[0],
    total_timesteps=4096,
    short_timesteps=4096,
    timeout_s=60,
    probe_seed=0,
)
REPORT = "metarl-os-limits-report:"


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def trace_in_tracer(source: str, limits: SandboxLimits, timeout_s: float = 60.0):
    """Run `source` as a drift candidate in a fresh tracer; (WorkerResult, its printed report)."""
    worker = WorkerProcess(limits, role="tracer")
    job = {"kind": "trace", "task": "drift", "source": source, "probe_seed": 0, "platform": "cpu"}
    try:
        run = worker.run(job, timeout_s)
    finally:
        worker.kill()
    lines = [line for line in run.output.splitlines() if line.startswith(REPORT)]
    report = ast.literal_eval(lines[-1][len(REPORT) :]) if lines else None
    return run, report


# --- 1. every writable mount is capped ---------------------------------------------------------
PRELUDE = """
J = jax
OS = J.version.os
B = J.version.subprocess.builtins
repr, set, sorted, type, range, Exception = B.repr, B.set, B.sorted, B.type, B.range, B.Exception
"""
FILL = (
    PRELUDE
    + """
BLOCK = b"x" * (1 << 20)
DONE = []


def read(path):
    fd = OS.open(path, OS.O_RDONLY)
    data = b""
    while True:
        chunk = OS.read(fd, 65536)
        if not chunk:
            break
        data = data + chunk
    OS.close(fd)
    return data.decode()


def fill(folder):
    written = 0
    for index in range(64):
        try:
            fd = OS.open(f"{folder}/fill-{index}", OS.O_WRONLY | OS.O_CREAT | OS.O_TRUNC, 384)
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


def drift(ratio, advantage, epsilon):
    if not DONE:
        DONE.append(1)
        mounts = {}
        for line in read("/proc/self/mountinfo").splitlines():
            fields = line.split()
            mounts[fields[4]] = fields[5].split(",")[0]
        written = {}
        for point in sorted(set(mounts) | {"/", "/dev", "/usr", "/work"}):
            if OS.path.isdir(point) and not point.startswith("/proc"):
                written[point] = fill(point)
        try:
            OS.memfd_create("x")
            memfd = "created"
        except OS.error as error:
            memfd = error.strerror
        ctypes = B.__import__("ctypes")
        libc = ctypes.CDLL(None, use_errno=True)
        segment = libc.shmget(0, 1 << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
        shmget = "created" if segment >= 0 else OS.strerror(ctypes.get_errno())
        print(MARK + repr({"mounts": mounts, "written": written, "memfd": memfd,
                           "shmget": shmget}))
    return jax.nn.relu((ratio - jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)) * advantage)
""".replace("MARK", repr(REPORT))
)


def test_every_writable_mount_is_size_capped_and_the_parent_is_fine():
    limits = SandboxLimits(timeout_s=120, memory_mb=6000, tmpfs_mb=64)
    run, report = trace_in_tracer(FILL, limits, timeout_s=120)
    assert report is not None, run.output[-2000:]
    written = {point: mb for point, mb in report["written"].items() if mb}
    # only /tmp (56 MB) and /dev/shm (8 MB) took anything: root, /dev, the binds are read-only
    assert set(written) == {"/tmp", "/dev/shm"}, report
    assert sum(written.values()) <= limits.tmpfs_mb
    rw = {point for point, mode in report["mounts"].items() if mode == "rw"}
    assert "/" not in rw and "/dev" not in rw
    # the tracer's seccomp filter: no memory outside the mounts
    assert report["memfd"] == report["shmget"] == "Operation not permitted"
    # the worker ended normally, then was killed and reaped; its temp dir is gone
    assert run.status == "ok"
    assert gone(run.pid) and not process_group_alive(run.pid)
    assert not os.path.exists(run.workdir)


def test_the_seccomp_filter_is_built_for_known_architectures_only():
    assert len(os_limits.seccomp_filter("x86_64")) == 10 * 8  # 10 instructions of 8 bytes
    assert len(os_limits.seccomp_filter("aarch64")) == 10 * 8
    assert os_limits.seccomp_filter("riscv64") is None


def test_the_writable_budget_is_split_between_tmp_and_shm():
    assert isolation.tmpfs_split(64) == (56, 8)
    assert isolation.tmpfs_split(4) == (4, 0)  # below 8 MB: /dev/shm stays read-only


def test_bubblewrap_argv_makes_root_and_dev_read_only_after_every_mount_point():
    mounts = isolation.Mounts("bwrap", ("/usr",), 64)
    argv = isolation.bubblewrap_argv(mounts, "tracer", None, {"PATH": "/usr/bin"})
    pairs = list(zip(argv, argv[1:]))
    assert ("--remount-ro", "/") in pairs and ("--remount-ro", "/dev") in pairs
    last_mount = max(
        i for i, a in enumerate(argv) if a in ("--tmpfs", "--dev", "--proc", "--ro-bind")
    )
    assert argv.index("--remount-ro", argv.index("/dev")) < last_mount
    assert pairs.index(("--remount-ro", "/")) > last_mount
    sizes = [int(argv[i + 1]) for i, a in enumerate(argv) if a == "--size"]
    assert sizes == [56 * 2**20, 8 * 2**20]


# --- 2. processes and threads ------------------------------------------------------------------
SLEEPER = "metarl-os-limits-sleeper"
BOMB = (
    PRELUDE
    + """
TH = J.version.subprocess.threading
SP = J.version.subprocess
TIME = J.version.subprocess.time
DONE = []


def drift(ratio, advantage, epsilon):
    if not DONE:
        DONE.append(1)
        threads, processes, stopped, refused = 0, 0, None, None
        start = TIME.time()
        try:
            for _ in range(5000):
                TH.Thread(target=TIME.sleep, args=(300,), daemon=True).start()
                threads = threads + 1
        except Exception as error:
            stopped = type(error).__name__
        try:
            for _ in range(5000):
                SP.Popen(["bash", "-c", "exec -a SLEEPER sleep 300"], stdin=SP.DEVNULL,
                         stdout=SP.DEVNULL, stderr=SP.DEVNULL)
                processes = processes + 1
        except Exception as error:
            refused = type(error).__name__
        print(MARK + repr({"threads": threads, "processes": processes, "stopped": stopped,
                           "refused": refused, "seconds": TIME.time() - start}))
        raise ValueError("os-limits report")
    return ratio
""".replace("MARK", repr(REPORT)).replace("SLEEPER", SLEEPER)
)


def test_a_thread_and_process_bomb_stops_at_the_limit_and_leaves_nothing_behind():
    limits = SandboxLimits(timeout_s=60, memory_mb=6000)
    start = time.perf_counter()
    run, report = trace_in_tracer(BOMB, limits, timeout_s=60)
    elapsed = time.perf_counter() - start
    limit = os_limits.process_limit()
    assert report is not None, run.output[-2000:]
    assert run.ready_info["processes"]["limit"] == limit
    if os.geteuid() == 0:
        assert run.ready_info["processes"]["enforced_by"] == "pids cgroup"
    # the worker's own threads (~22) + the candidate's threads + its processes: at most limit
    assert 0 < report["threads"] < limit and report["threads"] + report["processes"] < limit
    assert report["stopped"] == "RuntimeError"  # "can't start new thread"
    assert run.status == "ok" and "os-limits report" in run.result["payload"]["reason"]
    assert elapsed < limits.timeout_s + 10
    assert gone(run.pid) and not process_group_alive(run.pid)
    assert report["processes"] > 0 and report["refused"] in ("BlockingIOError", "OSError")
    left = [
        p for p in psutil.process_iter(["cmdline"]) if SLEEPER in " ".join(p.info["cmdline"] or [])
    ]
    assert not left


@pytest.mark.skipif(os.geteuid() != 0, reason="as a user, RLIMIT_NPROC is the limit")
def test_as_root_without_a_pids_cgroup_the_watchdog_kills_a_tree_over_the_limit(monkeypatch):
    class WatchdogOnly(os_limits.ProcessLimit):
        def __init__(self, limit: int):
            self.limit, self.cgroup, self.mechanism = 64, None, "watchdog"

    monkeypatch.setattr(sandbox, "ProcessLimit", WatchdogOnly)
    source = BOMB.replace("range(5000)", "range(400)")  # kept small: nothing else stops it
    run, report = trace_in_tracer(source, SandboxLimits(timeout_s=60, memory_mb=6000))
    assert run.status == "died", (run.status, run.reason)
    assert run.reason.startswith("exceeded the limit of 64 processes and threads")
    assert gone(run.pid) and not process_group_alive(run.pid)


def test_pids_hierarchy_is_found_for_cgroup_v1_and_v2(tmp_path):
    (tmp_path / "pids" / "user").mkdir(parents=True)
    v1 = "12:pids:/user\n0::/\n"
    assert os_limits._pids_hierarchy(v1, tmp_path) == tmp_path / "pids" / "user"
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory pids\n")
    assert os_limits._pids_hierarchy("0::/init.scope\n", tmp_path) == tmp_path
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory\n")
    assert os_limits._pids_hierarchy("0::/init.scope\n", tmp_path) is None


# --- 3. device nodes -----------------------------------------------------------------------------
NODES = (
    "/dev/nvidia-caps",
    "/dev/nvidia-modeset",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia0",
    "/dev/nvidia1",
    "/dev/nvidia2",
    "/dev/nvidiactl",
)


def bound_devices(role: str, pinned) -> list[str]:
    mounts = isolation.Mounts("bwrap", ("/usr",), 64, nodes=NODES)
    argv = isolation.bubblewrap_argv(mounts, role, pinned, {})
    return [argv[i + 1] for i, a in enumerate(argv) if a == "--dev-bind"]


def test_a_tracer_gets_no_device_node_at_all():
    assert bound_devices("tracer", None) == []
    assert bound_devices("tracer", [1]) == []


def test_an_unpinned_trainer_gets_every_device_node():
    assert bound_devices("trainer", None) == list(NODES)


def test_a_pinned_trainer_gets_its_gpu_and_the_control_nodes_only():
    assert bound_devices("trainer", [1]) == [
        "/dev/nvidia-modeset",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia1",
        "/dev/nvidiactl",
    ]


def test_a_pin_resolves_to_its_device_minor_and_uuid(tmp_path):
    for bus, minor in (("0000:01:00.0", 0), ("0000:41:00.0", 1)):
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "information").write_text(
            f"Model: \t\t NVIDIA H100\nGPU UUID: \t GPU-{minor}abc\nDevice Minor: \t {minor}\n"
        )
    gpus = isolation.nvidia_gpus(str(tmp_path))
    assert gpus == {0: "GPU-0abc", 1: "GPU-1abc"}
    assert isolation.resolve_pin("1", gpus) == (1, "GPU-1abc")
    assert isolation.resolve_pin("GPU-0abc", gpus) == (0, "GPU-0abc")
    assert isolation.resolve_pin("MIG-7", gpus) == (None, "MIG-7")  # unknown: every node
    assert isolation.resolve_pin("2", {}) == (2, "2")


def test_a_tracer_runs_jax_on_the_cpu_with_a_seccomp_filter_and_a_trainer_without():
    limits = SandboxLimits(unsafe_no_sandbox=False)
    processes = os_limits.ProcessLimit(10)
    try:
        tracer = isolation.launch(["python"], limits, "tracer", "3", "/tmp", None, processes)
        trainer = isolation.launch(["python"], limits, "trainer", "3", "/tmp", None, processes)
    finally:
        processes.release()
    try:
        assert "--seccomp" in tracer.command and tracer.filter_fd is not None
        assert "--seccomp" not in trainer.command and trainer.filter_fd is None
        setenv = lambda c: {c[i + 1]: c[i + 2] for i, a in enumerate(c) if a == "--setenv"}  # noqa: E731
        assert setenv(tracer.command)["JAX_PLATFORMS"] == "cpu"
        assert "JAX_PLATFORMS" not in setenv(trainer.command)
        assert setenv(tracer.command)["CUDA_VISIBLE_DEVICES"] == "3"
    finally:
        if tracer.filter_fd is not None:
            os.close(tracer.filter_fd)


# --- 4. artifacts parsed first in a throwaway worker -------------------------------------------
SCAN = """
import base64, json, os, sys, time
from jax import export
blob = bytearray(base64.b64decode(sys.argv[1]))
report = os.fdopen(int(sys.argv[2]), "w", buffering=1)
end = time.monotonic() + float(sys.argv[5])
for position in range(int(sys.argv[3]), min(int(sys.argv[4]), len(blob))):
    if time.monotonic() > end:
        break
    flipped = bytearray(blob)
    flipped[position] ^= 0xFF
    report.write(f"{position}\\n")
    try:
        exported = export.deserialize(flipped)
        exported.mlir_module()
        if exported.has_vjp():
            exported.vjp().mlir_module()
    except Exception:
        pass
report.write("done\\n")
"""


def _scan(text: str, start: int, stop: int, left: float) -> tuple[list[str], int]:
    """Run SCAN over positions [start, stop) for at most `left` seconds (killed 30 s later):
    the positions it reported, and its exit status."""
    read_end, write_end = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-c", SCAN, text, str(write_end), str(start), str(stop), str(left)],
        pass_fds=(write_end,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write_end)
    watchdog = threading.Timer(left + 30.0, process.kill)
    watchdog.start()
    with os.fdopen(read_end) as report:
        lines = report.read().split()
    process.wait()
    watchdog.cancel()
    return lines, process.returncode


def crashing_flips(blob: bytes, wanted: int, stop: int, budget_s: float) -> list[int]:
    """Byte positions whose flip (xor 0xFF) crashes JAX's deserialiser in a fresh process,
    found within `budget_s`: the scan stops itself there, and is killed 30 s later should a
    flip hang the deserialiser (a hang is not a crash: not counted). Why the scan's own clock:
    a scan that finds no crash reads the whole blob, and on a loaded machine that outran the
    test's 600 s limit. Why each crash is confirmed alone, twice: the scan parses many flips in
    one process, and a flip that only corrupts the heap can let a later, harmless one take the
    blame (seen in CI: the flip named raised an error when parsed alone, and crashed nothing).
    """
    found, position, deadline = [], 0, time.monotonic() + budget_s
    text = base64.b64encode(blob).decode()
    while len(found) < wanted and position < stop and time.monotonic() < deadline:
        lines, returncode = _scan(text, position, stop, deadline - time.monotonic())
        if not lines or lines[-1] == "done" or returncode == -signal.SIGKILL:
            break
        suspect = int(lines[-1])
        alone = [_scan(text, suspect, suspect + 1, 60.0) for _ in range(2)]
        if all(
            code < 0 and code != -signal.SIGKILL and out[-1:] != ["done"] for out, code in alone
        ):
            found.append(suspect)
        position = suspect + 1
    return found


def test_byte_flipped_artifacts_that_crash_the_deserialiser_never_reach_the_trainer(monkeypatch):
    from metarl.evaluation.stages import trace_candidate

    task = get_task("drift")
    source = task.seed_program("lpo").source
    intact = trace_candidate(task, source, 0, "cpu").artifact
    (name,) = intact
    blob = base64.b64decode(intact[name])
    crashes = crashing_flips(blob, wanted=2, stop=len(blob), budget_s=240)
    if not crashes:
        pytest.skip("this JAX's deserialiser survived every flip tried")
    flipped = []
    for position in crashes:
        data = bytearray(blob)
        data[position] ^= 0xFF
        flipped.append({name: base64.b64encode(bytes(data)).decode()})
    sources = [source] + [f"{source}\n# flipped at {p}\n" for p in crashes]
    artifacts = dict(zip(sources, [intact] + flipped))

    def fake_trace(self, candidate, task):  # the tracer's artifact, as a forged one would be
        candidate.artifact = artifacts[candidate.source]
        candidate.train_probe_seed = 1

    monkeypatch.setattr(Evaluator, "_trace", fake_trace)
    jobs = []
    with Evaluator(CascadeSettings(**SETTINGS), workers=1) as evaluator:
        original = evaluator._executor.run

        def record(role, job, limit, on_event=None):
            result = original(role, job, limit, on_event)
            jobs.append((role, job.get("kind"), len(job.get("artifacts", [])), result.status))
            return result

        evaluator._executor.run = record
        outcomes = evaluator.evaluate_batch(sources, "drift")
    assert outcomes[0].passed, outcomes[0].reason
    # a flip that crashed the scan twice may still only raise in the checker (the deserialiser's
    # crash depends on memory it did not initialise: seen in CI): either way it is refused as
    # the candidate's, and never reaches a trainer
    refused = (CRASH, "the exported program was refused")
    for outcome in outcomes[1:]:
        assert not outcome.passed and outcome.fault == "candidate"
        assert outcome.reason.startswith(refused), outcome.reason
    checks = [job for job in jobs if job[1] == "check_artifacts"]
    assert checks[0][2] == 3  # one batch check of all three; when it crashed, each alone
    if checks[0][3] == "died":
        assert sorted(job[2] for job in checks[1:]) == [1, 1, 1]
    trainer = [job for job in jobs if job[0] == "trainer" and job[1] == "evaluate"]
    assert trainer and all(job[3] == "ok" for job in trainer)  # no trainer ever crashed
    assert all(job[2] == 1 for job in trainer)  # and only the intact artifact reached one


def test_the_digest_vouches_for_exactly_the_artifact_checked():
    assert artifact_digest({"a": "x", "b": "y"}) == artifact_digest({"b": "y", "a": "x"})
    assert artifact_digest({"a": "x"}) != artifact_digest({"a": "y"})


# --- 5. the compilation cache -------------------------------------------------------------------
def test_a_trainer_sees_the_cache_read_only_and_only_its_staging_writable():
    mounts = isolation.Mounts("bwrap", ("/usr",), 64, cache="/c/xla", staging="/p/stage")
    trainer = isolation.bubblewrap_argv(mounts, "trainer", None, {})
    tracer = isolation.bubblewrap_argv(mounts, "tracer", None, {})
    triples = lambda argv: list(zip(argv, argv[1:], argv[2:]))  # noqa: E731
    assert ("--ro-bind", "/c/xla", isolation.SANDBOX_CACHE) in triples(trainer)
    assert ("--bind", "/p/stage", isolation.SANDBOX_STAGING) in triples(trainer)
    assert ("--bind", "/c/xla", isolation.SANDBOX_CACHE) not in triples(trainer)
    assert "/c/xla" not in tracer and "/p/stage" not in tracer


def cache_files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in path.iterdir()} if path.is_dir() else {}


def test_a_trainer_stopped_mid_run_adds_nothing_and_a_clean_run_adds_what_the_next_loads(
    monkeypatch, tmp_path
):
    monkeypatch.setenv("METARL_CACHE_DIR", str(tmp_path))
    xla = tmp_path / "xla"
    results, staged_seen = [], []

    def evaluator(stop_when_staged: bool) -> Evaluator:
        built = Evaluator(CascadeSettings(**SETTINGS), workers=1, prewarm=False)
        original = built._executor.run

        def run(role, job, limit, on_event=None):
            if role != "trainer":
                return original(role, job, limit, on_event)
            worker = built._executor.pool("trainer").acquire()

            def watch(message):
                staged = [
                    p.name
                    for p in worker.staging.path.iterdir()
                    if p.name.endswith("-cache") and not p.is_symlink()
                ]
                if stop_when_staged and staged:
                    staged_seen.extend(staged)
                    return True  # killed while (or just after) JAX writes its first entry
                return on_event(message) if on_event else False

            result = worker.run(job, limit, watch)
            results.append(result)
            return result

        built._executor.run = run
        return built

    with evaluator(stop_when_staged=True) as stopped:
        with pytest.raises(RuntimeError, match="baseline"):
            stopped.references("drift")
    assert staged_seen, "the trainer was stopped before it staged anything"
    assert results[-1].status == "stopped" and results[-1].cache_committed == 0
    assert cache_files(xla) == {}  # nothing new, nothing partial, no temp file

    with evaluator(stop_when_staged=False) as clean:
        clean.references("drift")
    first = cache_files(xla)
    assert results[-1].status == "ok" and results[-1].cache_committed == len(first) > 0
    assert all(name.endswith("-cache") for name in first)

    for baseline in (tmp_path / "baselines").glob("*.json"):
        baseline.unlink()  # the same programs again: compiled before, loaded now
    with evaluator(stop_when_staged=False) as again:
        again.references("drift")
    assert results[-1].status == "ok" and results[-1].cache_committed == 0
    assert cache_files(xla) == first
