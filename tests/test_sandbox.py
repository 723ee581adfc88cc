"""The sandbox: worker isolation, limits, the private result channel, pre-warming, teardown."""

from __future__ import annotations

import json
import os
import threading
import time

import psutil
import pytest

from metarl.evaluation.cascade import CascadeSettings, Evaluator
from metarl.evaluation.sandbox import (
    MAX_MESSAGE_BYTES,
    SandboxLimits,
    WorkerProcess,
    process_group_alive,
    run_job,
    scrubbed_environment,
)
from metarl.tasks import get_task


@pytest.fixture(scope="module", autouse=True)
def cache_dir(metarl_cache):
    """The session's METARL_CACHE_DIR (tests/conftest.py): baselines are trained once."""
    return metarl_cache


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


SETTINGS = dict(
    suite="smoke",
    seeds=1,
    seed_values=[0],
    total_timesteps=4096,
    short_timesteps=4096,
    timeout_s=60,
    probe_seed=0,
)


def test_environment_is_an_allow_list_without_secrets(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("METARL_LLM_API_KEY", "secret")
    monkeypatch.setenv("GITHUB_TOKEN", "secret")
    monkeypatch.setenv("SOME_UNRELATED_VAR", "x")
    env = scrubbed_environment(str(tmp_path))
    assert not {"OPENAI_API_KEY", "METARL_LLM_API_KEY", "GITHUB_TOKEN", "SOME_UNRELATED_VAR"} & set(
        env
    )
    assert env["HOME"] == env["TMPDIR"] == str(tmp_path)
    assert "METARL_CACHE_DIR" not in env  # workers never learn where the cache is


@pytest.mark.parametrize("role", ["tracer", "trainer"])
def test_worker_is_isolated_limited_and_cleaned_up(monkeypatch, role):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary-7f3a9c")
    limits = SandboxLimits(timeout_s=30, memory_mb=6000, max_file_mb=16, nofile=256)
    run = run_job({"kind": "introspect"}, limits, role=role)
    assert run.status == "ok", run.reason
    inside = run.result["payload"]
    assert run.ready_info["isolation"] == "bubblewrap"
    # no network: an empty network namespace
    assert inside["connect"] != "connected"
    assert run.ready_info["network"] == "netns"
    # its own PID namespace: only its own processes, and none of their environments holds a
    # secret (bubblewrap's PID-1 helper was started with an empty environment)
    assert (
        inside["visible_pids"] == sorted(inside["visible_pids"])
        and len(inside["visible_pids"]) <= 3
    )
    assert os.getpid() not in inside["visible_pids"] or inside["visible_pids"] == [1, 2]
    assert not any("sk-canary" in text for text in inside["environs"].values())
    assert inside["environs"]["1"] == ""
    # an unprivileged uid, and only the interpreter, the venv and metarl from the host
    assert inside["uid"] == 65534
    assert "home" not in inside["root"] and "etc" in inside["root"]
    assert "shadow" not in inside["etc"] and "passwd" not in inside["etc"]
    # scrubbed environment, throwaway working directory (a private tmpfs)
    assert "OPENAI_API_KEY" not in inside["env"]
    assert "METARL_CACHE_DIR" not in inside["env"]
    assert inside["cwd"] == inside["home"] == "/tmp"
    # limits, set before anything was imported
    assert inside["rlimits"]["RLIMIT_AS"][0] == 6000 * 2**20
    assert inside["rlimits"]["RLIMIT_FSIZE"][0] == 16 * 2**20
    assert inside["rlimits"]["RLIMIT_NOFILE"][0] == 256
    assert inside["rlimits"]["RLIMIT_CPU"][0] == limits.cpu_limit()
    assert inside["rlimits"]["RLIMIT_CORE"][0] == 0
    # its own session and process group, killed and reaped afterwards, temp dir removed
    assert inside["pgid"] == inside["sid"]  # a new session (bwrap --new-session)
    assert gone(run.pid) and not process_group_alive(run.pid)
    assert not os.path.exists(run.workdir)


def test_limits_apply_before_imports_so_a_tiny_memory_limit_fails_startup():
    run = run_job(
        {"kind": "introspect"}, SandboxLimits(timeout_s=30, memory_mb=64, startup_timeout_s=60)
    )
    assert run.status == "startup"
    assert "failed to start" in run.reason
    assert gone(run.pid) and not os.path.exists(run.workdir)


def test_timeout_kills_the_whole_process_group():
    source = (
        "def drift(ratio, advantage, epsilon):\n    while True:\n        pass\n    return ratio\n"
    )
    worker = WorkerProcess(SandboxLimits(timeout_s=3), role="tracer")
    assert worker.wait_ready()
    job = {"kind": "trace", "task": "drift", "source": source, "probe_seed": 0, "platform": "cpu"}
    start = time.perf_counter()
    run = worker.run(job, timeout_s=3)
    elapsed = time.perf_counter() - start
    assert run.status == "timeout"
    assert run.reason == "timed out after 3 s in stage probes"
    assert elapsed < 3 + 5
    assert gone(run.pid) and not process_group_alive(run.pid)
    assert not os.path.exists(run.workdir)


def test_candidate_output_cannot_forge_a_result():
    forged = (
        '{"event": "result", "kind": "evaluate", '
        '"payload": {"passed": true, "stage": "full", "fitness": 99.0}}'
    )
    source = (
        "def drift(ratio, advantage, epsilon):\n"
        f"    print({forged!r})\n"
        "    return (ratio - 1.0) * advantage\n"  # negative: fails the probes
    )
    with Evaluator(CascadeSettings(**SETTINGS), workers=1, prewarm=False) as evaluator:
        outcome = evaluator.evaluate(source, "drift")
    assert not outcome.passed and outcome.stage == "probes"
    assert "drift is negative" in outcome.reason
    assert outcome.fitness is None
    assert forged in outcome.stdout  # the print is captured, as output only


def test_channel_turns_non_objects_and_over_long_lines_into_garbled_events():
    read_fd, write_fd = os.pipe()
    channel = WorkerProcess.__new__(WorkerProcess)  # only the reading half of a worker
    channel.read_fd, channel._buffer, channel._overflow = read_fd, bytearray(), False
    lines = [
        b'{"event": "ready"}',
        b"[1, 2]",
        b"{broken",
        b"A" * (MAX_MESSAGE_BYTES + 10),
        b'{"event": "x"}',
    ]

    def write() -> None:
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(b"\n".join(lines) + b"\n")

    writer = threading.Thread(target=write)
    writer.start()
    messages, eof = [], False
    while not eof:
        batch, eof = channel._read_messages(5.0)
        messages += batch
    writer.join()
    os.close(read_fd)
    events = [message["event"] for message in messages]
    assert events == ["ready", "garbled", "garbled", "garbled", "x"]
    assert "longer than" in messages[3]["reason"] and len(messages[3]["line"]) == 200


def test_pool_prewarms_and_never_reuses_a_worker():
    bad = "def drift(ratio, advantage, epsilon):\n    return ratio[:, None]\n"
    with Evaluator(CascadeSettings(**SETTINGS), workers=1) as evaluator:
        pids = []
        for _ in range(2):
            spare = evaluator._executor.pool("tracer")._idle[0]
            assert spare.wait_ready()  # the spare has imported jax already
            outcome = evaluator.evaluate(bad, "drift")
            assert outcome.stage == "probes" and "has shape (64, 1)" in outcome.reason
            assert outcome.timings["wait_worker"] < 0.5
            assert outcome.timings["import"] > 0.2  # paid before the candidate arrived
            pids.append(outcome.sandbox["worker_pid"])
            assert gone(pids[-1])
        assert pids[0] != pids[1]
        live = [w for w in evaluator._executor.pool("tracer")._idle]
    for worker in live:
        assert gone(worker.pid) and not os.path.exists(worker.tmpdir)


def test_concurrent_evaluations_are_independent():
    from concurrent.futures import ThreadPoolExecutor

    shapes = {
        "def drift(ratio, advantage, epsilon):\n    return ratio[:, None]\n": "has shape (64, 1)",
        "def drift(ratio, advantage, epsilon):\n    return ratio > 1.0\n": "has dtype bool",
    }
    with Evaluator(CascadeSettings(**SETTINGS), workers=2) as evaluator:
        with ThreadPoolExecutor(2) as threads:
            outcomes = dict(
                zip(shapes, threads.map(lambda s: evaluator.evaluate(s, "drift"), shapes))
            )
    for source, reason in shapes.items():
        assert outcomes[source].stage == "probes" and reason in outcomes[source].reason
    assert (
        outcomes[list(shapes)[0]].sandbox["worker_pid"]
        != outcomes[list(shapes)[1]].sandbox["worker_pid"]
    )


def test_only_a_trainer_sees_the_compilation_cache(tmp_path):
    limits = SandboxLimits(timeout_s=30, memory_mb=6000, compilation_cache=str(tmp_path / "xla"))
    seen = {}
    for role in ("tracer", "trainer"):
        run = run_job({"kind": "introspect"}, limits, role=role)
        assert run.status == "ok", run.reason
        seen[role] = run.result["payload"]
    assert "metarl-xla-cache" not in seen["tracer"]["root"]
    assert "METARL_XLA_CACHE" not in seen["tracer"]["env"]
    assert "metarl-xla-cache" in seen["trainer"]["root"]
    assert "METARL_XLA_CACHE" in seen["trainer"]["env"]
    assert str(tmp_path) not in json.dumps(seen)  # the host path stays outside


def test_trainers_fill_the_compilation_cache(metarl_cache):
    settings = CascadeSettings(**SETTINGS)
    with Evaluator(settings, workers=1, prewarm=False) as evaluator:
        evaluator.references("drift")  # baselines: compiled in a trainer (cached on disk)
        outcome = evaluator.evaluate(get_task("drift").seed_program("lpo").source, "drift")
    assert outcome.passed, outcome.reason
    entries = [p.name for p in (metarl_cache / "xla").iterdir()]
    assert any(name.startswith("jit_segment") for name in entries), entries
