"""The executors: local workers pinned one per device, and a Ray cluster on 127.0.0.1.

Fast: a batch trained as two shares on two pinned local "devices" scores exactly as one trainer
job does; each pinned worker sees only its device; a batch sent through a private Ray instance
scores exactly as the local executor; a bad executor option is one line.

Slow (`-m slow`): a real Ray cluster started with `ray start --head` on a fixed port (two CPUs,
so two Ray worker processes), `metarl discover --executor ray` through it archiving the same
programs and numbers as a local run; a Ray worker killed (SIGKILL) while it carries a job
(a tracer or a trainer): Ray re-runs the task, the run completes, every candidate is archived
once, with the local run's numbers; a driver killed mid-run resumes and reconnects.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import TINY_DISCOVER, invoke, metarl_cli

from metarl.evaluation.cascade import Evaluator, baseline_shares
from metarl.evaluation.executors import ExecutorSettings, pinned_devices
from metarl.evaluation.sandbox import WorkerProcess
from metarl.evaluation.settings import CascadeSettings, plan_runs
from metarl.tasks import get_task

ray = pytest.importorskip(
    "ray", reason='the ray extra is not installed (pip install "metarl[ray]")'
)

# the seed programs' setting in the session's seeded archive (TINY_DISCOVER's seeds): its rows
# are the local executor's numbers for the two seed programs, already paid for
SETTINGS = CascadeSettings(
    suite="smoke",
    seeds=1,
    seed_values=[0],
    total_timesteps=8192,
    heldout=True,
    skip_short=True,
    probe_seed=0,
)
SEEDS = ("lpo", "ppo_clip")
PORT = 6391  # the test cluster's head (GCS) port


def batch() -> list[str]:
    """Two distinct programs: the drift task's seed programs."""
    return [get_task("drift").seed_program(name).source for name in SEEDS]


def scores(outcomes) -> list:
    """What must not depend on where a program was trained: fate, fitness, returns per env."""
    return [(o.passed, o.fitness, [e.returns for e in o.env_scores]) for o in outcomes]


@pytest.fixture(scope="module")
def local_scores(seeded_archive_template):
    """The seed programs' scores as the local executor archived them (the seeded archive)."""
    with sqlite3.connect(seeded_archive_template) as conn:
        out = []
        for name in SEEDS:
            cid, status, fitness = conn.execute(
                "SELECT id, status, fitness FROM candidates WHERE name = ? AND is_seed = 1",
                (name,),
            ).fetchone()
            returns = [
                json.loads(r)
                for (r,) in conn.execute(
                    "SELECT returns FROM evaluations WHERE candidate_id = ? ORDER BY id", (cid,)
                )
            ]
            out.append((status == "passed", fitness, returns))
    return out


@pytest.mark.slow  # end to end: the batch trained alone, then as two shares (~60 s)
def test_a_batch_split_over_two_pinned_devices_scores_as_one_trainer_job(local_scores):
    executor = ExecutorSettings(devices=("0", "1"))
    with Evaluator(SETTINGS, workers=1, executor=executor) as evaluator:
        outcomes = evaluator.evaluate_batch(batch(), "drift")
    assert scores(outcomes) == local_scores
    # two trainer jobs at once, one candidate each, in two different workers
    assert [o.sandbox["batch"]["size"] for o in outcomes] == [1, 1]
    assert outcomes[0].sandbox["worker_pid"] != outcomes[1].sandbox["worker_pid"]


def test_a_pinned_worker_sees_only_its_device(metarl_cache):
    worker = WorkerProcess(SETTINGS.limits(), role="tracer", device="3")
    try:
        assert worker.wait_ready()
        python = [
            p
            for p in psutil.Process(worker.pid).children(recursive=True)
            if p.name() != "bwrap" and "metarl.evaluation.worker" in " ".join(p.cmdline())
        ]
        assert python and python[0].environ().get("CUDA_VISIBLE_DEVICES") == "3"
    finally:
        worker.kill()


def test_workers_are_pinned_to_gpus_only_when_there_are_several(monkeypatch):
    assert pinned_devices(["2", "5"], workers=1) == ("2", "5")  # given: always used
    monkeypatch.setattr("metarl.platform.visible_gpus", lambda: [])
    assert pinned_devices([], workers=4) == ()  # a CPU: today's single pool
    monkeypatch.setattr("metarl.platform.visible_gpus", lambda: ["0", "1", "2"])
    assert pinned_devices([], workers=2) == ("0", "1")
    assert pinned_devices([], workers=1) == ()


def test_bad_executor_options_are_one_line(tmp_path, restore_logging):
    db = str(tmp_path / "a.db")
    both = invoke("discover", "--executor", "ray", "--devices", "0,1", "--archive", db)
    assert both.exit_code == 2 and "devices pin local workers" in both.output
    address = invoke("discover", "--ray-address", "10.0.0.1:6379", "--archive", db)
    assert address.exit_code == 2 and "needs the ray executor" in address.output
    nobody = invoke(
        "discover", "--executor", "ray", "--ray-address", "127.0.0.1:9", "--archive", db
    )
    assert nobody.exit_code == 1 and "no Ray cluster answers at 127.0.0.1:9" in nobody.output
    assert not os.path.exists(db)


@pytest.fixture(scope="module")
def ray_token(tmp_path_factory):
    """Token authentication for every Ray process the tests start (Ray 2.59+ turns it on for
    local clusters by default and would otherwise write a token into ~/.ray): the mode and a
    token file of the test's own, in the environment of the drivers and of `ray start`."""
    path = tmp_path_factory.mktemp("ray-auth") / "token"
    path.write_text(secrets.token_hex(32))
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(path))
    yield path
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def test_a_batch_in_two_cpu_shares_scores_as_one_trainer(local_scores, metarl_cache):
    """`--trainers 2` on a CPU: the batch is trained as two shares at once, one trainer
    process each, and every number is the one a single trainer gave (the seeded archive)."""
    executor = ExecutorSettings(trainers=2)
    with Evaluator(SETTINGS, workers=1, executor=executor) as evaluator:
        assert evaluator._executor.slots == 2
        outcomes = evaluator.evaluate_batch(batch(), "drift")
    assert [o.sandbox["batch"]["size"] for o in outcomes] == [1, 1]
    same = json.loads(json.dumps(local_scores))
    assert json.loads(json.dumps(scores(outcomes))) == same  # bit for bit


def test_baselines_trained_in_shares_of_whole_envs_are_the_same(tmp_path, monkeypatch):
    """Two envs' baselines in two trainer jobs at once equal those of one job, bit for bit
    (each with a cold cache of its own)."""
    settings = CascadeSettings(
        suite="classic", seeds=1, seed_values=[0], total_timesteps=8192, heldout=False
    )
    plan = plan_runs(settings)
    shares = baseline_shares(plan, 2)
    assert len(shares) == 2 and sorted(sum(shares, [])) == sorted({e.key for e in plan})
    assert baseline_shares(plan, 1) == [sorted({e.key for e in plan})]
    runs = {}
    for trainers in (1, 2):
        monkeypatch.setenv("METARL_CACHE_DIR", str(tmp_path / f"cache-{trainers}"))
        executor = ExecutorSettings(trainers=trainers)
        with Evaluator(settings, workers=1, executor=executor, prewarm=False) as evaluator:
            baseline = evaluator.baseline("drift", seeds=[0])
        runs[trainers] = {env: run.final_returns for env, run in baseline.items()}
    assert set(runs[1]) == {"CartPole-v1", "Acrobot-v1"}
    assert runs[2] == runs[1]


def test_trainers_are_cores_of_this_machine_only():
    with pytest.raises(ValueError, match="trainers shares a batch"):
        ExecutorSettings(kind="ray", trainers=2)
    with pytest.raises(ValueError, match="trainers shares a batch"):
        ExecutorSettings(devices=("0", "1"), trainers=2)
    with pytest.raises(ValueError, match="at least 1"):
        ExecutorSettings(trainers=0)


THROUGH_RAY = """
import json, sys
from metarl.evaluation.cascade import Evaluator, baseline_shares
from metarl.evaluation.executors import ExecutorSettings
sys.path.insert(0, sys.argv[1])
from test_ray import SETTINGS, batch, scores
executor = ExecutorSettings(kind="ray", ray_address="local")
with Evaluator(SETTINGS, workers=2, executor=executor) as evaluator:
    outcomes = evaluator.evaluate_batch(batch(), "drift")
shares = [o.sandbox["batch"]["size"] for o in outcomes]
print(json.dumps({"scores": scores(outcomes), "shares": shares}))
"""


@pytest.mark.slow  # end to end: a private Ray instance trains the batch (~30 s)
def test_a_batch_through_ray_scores_as_the_local_executor(local_scores, ray_token):
    """A private Ray instance, in a driver process of its own (Ray reads its settings, the
    token's among them, when it is imported)."""
    result = subprocess.run(
        [sys.executable, "-c", THROUGH_RAY, str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(result.stdout.strip().splitlines()[-1])
    assert data["scores"] == json.loads(json.dumps(local_scores))  # the same, bit for bit
    assert data["shares"] == [1, 1]


# -- a real cluster --------------------------------------------------------------------------


def ray_cli(*args: str) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).with_name("ray")), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def cluster(ray_token):
    """`ray start --head` on 127.0.0.1:PORT with two CPUs (two Ray worker processes)."""
    started = ray_cli(
        "start",
        "--head",
        "--node-ip-address",
        "127.0.0.1",
        "--port",
        str(PORT),
        "--num-cpus",
        "2",
        "--num-gpus",
        "0",
        "--include-dashboard",
        "false",
        "--disable-usage-stats",
    )
    assert started.returncode == 0, started.stdout + started.stderr
    yield f"127.0.0.1:{PORT}"
    ray_cli("stop", "--force")


def archived(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT id, seq, hash, status, stage, fitness FROM candidates ORDER BY seq"
        ).fetchall()


@pytest.fixture(scope="module")
def local_run(seeded_archive_template, tmp_path_factory):
    db = tmp_path_factory.mktemp("local") / "metarl.db"
    shutil.copy(seeded_archive_template, db)
    result = metarl_cli("discover", *TINY_DISCOVER, "--budget", "4", "--archive", str(db))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return archived(db)


@pytest.mark.slow
def test_discover_through_a_ray_cluster_archives_the_local_runs_numbers(
    cluster, local_run, seeded_archive_template, tmp_path
):
    db = tmp_path / "metarl.db"
    shutil.copy(seeded_archive_template, db)
    ray_options = ["--executor", "ray", "--ray-address", cluster, "--workers", "2"]
    result = metarl_cli(
        "discover", *TINY_DISCOVER, "--budget", "4", *ray_options, "--archive", str(db)
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert archived(db) == local_run


def discover_through(cluster: str, db: Path, *options: str) -> list[str]:
    """The command line of a 4-child tiny discover run on `cluster`, into `db`."""
    return [
        sys.executable,
        "-c",
        "from metarl.cli.app import main; main()",
        "discover",
        *TINY_DISCOVER,
        *("--budget", "4", "--executor", "ray", "--ray-address", cluster, *options),
        *("--archive", str(db)),
    ]


def _busy_carriers() -> list[psutil.Process]:
    """Ray worker processes executing a `carry` task right now (Ray titles an idle worker
    `ray::IDLE`, a busy one by its task's name)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if "ray::carry" in " ".join(process.info["cmdline"] or []):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@pytest.mark.slow
def test_a_ray_worker_killed_mid_task_is_retried_and_nothing_is_archived_twice(
    cluster, local_run, seeded_archive_template, tmp_path
):
    db = tmp_path / "metarl.db"
    shutil.copy(seeded_archive_template, db)
    command = discover_through(cluster, db, "--workers", "2")
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    deadline = time.monotonic() + 300
    while killed is None and run.poll() is None and time.monotonic() < deadline:
        carriers = _busy_carriers()
        if carriers:
            time.sleep(0.5)  # mid-task: its sandboxed worker has the job
            killed = carriers[0].pid
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.1)
    stdout, stderr = run.communicate(timeout=600)
    assert killed is not None, "no Ray worker carried a task while the run lasted"
    assert run.returncode == 0, stdout[-2000:] + stderr[-2000:]
    rows = archived(db)
    assert len({row[0] for row in rows}) == len(rows) == len(local_run)  # each once
    assert rows == local_run  # the re-run task gave the same numbers


@pytest.mark.slow
def test_a_killed_driver_resumes_and_reconnects_to_the_cluster(
    cluster, seeded_archive_template, tmp_path
):
    db = tmp_path / "metarl.db"
    shutil.copy(seeded_archive_template, db)
    command = discover_through(cluster, db, "--children", "2")
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    children = 0
    while children < 1 and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
        with sqlite3.connect(db) as conn:
            children = conn.execute(
                "SELECT count(*) FROM candidates WHERE run_id = 'r2' AND is_seed = 0"
            ).fetchone()[0]
    assert driver.poll() is None, "the run ended before it could be killed"
    driver.kill()  # SIGKILL: no clean-up, the run stays 'running' in the archive
    driver.wait()
    resumed = metarl_cli("resume", "r2", "--archive", str(db))
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    rows = [row for row in archived(db) if row[0].startswith("r2-")]
    with sqlite3.connect(db) as conn:
        status = conn.execute("SELECT status FROM runs WHERE id = 'r2'").fetchone()[0]
        children = conn.execute(
            "SELECT count(*) FROM candidates WHERE run_id = 'r2' AND is_seed = 0"
        ).fetchone()[0]
    assert status == "finished" and children == 4
    assert len({row[0] for row in rows}) == len(rows)  # nothing archived twice
