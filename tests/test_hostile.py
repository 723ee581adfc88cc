"""Hostile candidates (tests/hostile/): attacks on the sandbox, every one of which passes the
static check (stage 1 is a friendly filter, not the boundary), so each of them really executes
arbitrary Python in the tracer. Whatever they do, the evaluation must *contain* them: the
candidate fails with a clean reason or gets an honest score, and nothing it does is visible
outside its sandbox.

Each corpus file starts with a header:
    # task: drift | optimizer
    # attack: what it tries (the coverage test looks for keywords here)
    # contained: what containment means for it
    # expect: fail | honest    (honest: may pass or fail, but a fitness is an honest one, < 3)
    # expect-reason: a substring of the reason (optional)
    # settings: {"timeout_s": 60}   (optional CascadeSettings overrides; such a file runs alone)
    # run: parallel | alone | alone-last   (optional, default parallel)

Files write only *tagged* things: marker files named `metarl-hostile-marker-<stem>...` and
processes whose command line contains `metarl-hostile-sleeper-<stem>`, so that anything that
escapes is attributed to the file that did it even when two evaluations run at once.

The world the candidates are let loose in (`World`, one per module, re-checked and repaired
around every evaluation):
- canaries in the parent's environment (METARL_HOSTILE_API_KEY, OPENAI_API_KEY and the
  plainly named METARL_HOSTILE_CANARY) and in the exec-time environment of a sacrificial
  `sleep 600` started by the test (so /proc/<pid>/environ would show them), and in the name and
  content of a secret file in the parent's cwd;
- the parent's cwd is a private directory holding that file and a small sqlite archive;
- the session's METARL_CACHE_DIR, with the baselines already trained, snapshotted byte for byte;
- a TCP listener on 127.0.0.1, a filesystem unix socket and an abstract unix socket, whose
  addresses are advertised only in the sacrificial sleep's environment.

After every evaluation: (1) no canary (raw, reversed, hex, base64 or with separators) and no
line of the host's /etc/shadow in the Outcome; (2) no marker file in /tmp, $HOME,
~/.cache/metarl, the pytest temp dirs or the parent's cwd, and no new file in the cwd; (3) the
cache and the archive unchanged; (4) no process with `metarl-hostile` in its command line, the
sacrificial sleep and the test process alive, no connection to the listeners; (5) `expect`
holds and no fitness >= 3; (6) it ended within its limits (plus SLACK_S); (7) the reason, the
warnings and stdout carry no control characters but newlines and tabs; and `evaluate` did not
raise.

Files with run: parallel go through one Evaluator two at a time (module fixture), the others
one at a time with a fresh Evaluator each (those whose damage, if any, could not be attributed
to one file: killing processes, rewriting the cache or the archive, filling the disk); the
process killers run last.

HOSTILE_REPORT_FILE=path appends one JSON line per file (outcome, reason, stdout, problems).
Against a build whose sandbox may not hold, run the module inside a throwaway PID namespace
(`unshare --pid --fork --mount-proc python -m pytest tests/test_hostile.py`): the killers then
cannot reach anything outside the test.
"""

from __future__ import annotations

import base64
import binascii
import glob
import json
import math
import os
import re
import secrets
import shutil
import socket
import sqlite3
import subprocess
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from metarl.evaluation.cascade import CascadeSettings, Evaluator, evaluate_source
from metarl.evaluation.static_check import check_task_source
from metarl.tasks import get_task

# the whole corpus through real sandboxes (7 min 35 s alone on 2 cores): the slow tier, which CI
# runs in a pass of its own. 1500 s: the first parallel file's test also runs the parallel_runs
# fixture, i.e. the whole parallel corpus (354 s alone on 2 cores; over 400 s on CI's busy ones)
pytestmark = [pytest.mark.timeout(1500), pytest.mark.slow]

CORPUS = Path(__file__).parent / "hostile"
# trace_timeout_s 30 (default 60): the trace-time loops (which burn a core until they are
# killed) stop sooner; honest tracing takes 3.5-7 s here alone, more than 10 s with four
# evaluations on CI's 2 cores (the limit was 10 s until four files ran into it there)
BASE = dict(
    suite="smoke",
    seeds=1,
    seed_values=[0],  # pinned: the snapshotted baseline cache must stay byte for byte
    total_timesteps=4096,
    short_timesteps=4096,
    timeout_s=60,
    trace_timeout_s=30,
    probe_seed=0,
)
FITNESS_CEILING = 3.0
# a file must end within its tracer's and its trainer's limits plus this: a candidate the limits
# do not stop runs on far past it. The slack is for starting sandboxes on a loaded machine: an
# honest optimizer file took 109.6 s (limits 30 + 60 s) with the corpus's two evaluations and
# another process on 2 cores (the limit was timeout_s + 30 s until then)
SLACK_S = 60.0
MARKER = "metarl-hostile"
TAG = re.compile(r"metarl-hostile-(?:marker|sleeper)-([a-z0-9_]+)")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def header(path: Path) -> dict:
    fields = dict(re.findall(r"^# ([\w-]+): (.*)$", path.read_text(), re.M))
    fields["settings"] = json.loads(fields.get("settings", "{}"))
    fields.setdefault("run", "parallel")
    if fields["settings"] and fields["run"] == "parallel":
        fields["run"] = "alone"
    return fields


FILES = sorted(CORPUS.glob("*.py"))
# the slow ones first (a trace-time loop runs into its limit, an honest candidate trains), so
# that the two slots stay busy to the end
PARALLEL = sorted(
    (p for p in FILES if header(p)["run"] == "parallel"),
    key=lambda p: (
        0
        if re.search(r"loop", header(p)["attack"])
        else 1
        if header(p)["expect"] == "honest"
        else 2,
        p.name,
    ),
)
ALONE = [p for p in FILES if header(p)["run"] == "alone"]
LAST = [p for p in FILES if header(p)["run"] == "alone-last"]
ORDERED = PARALLEL + ALONE + LAST

# Every attack pattern the corpus must cover: name -> regex over the `# attack:` lines.
REQUIRED_ATTACKS = {
    "alias J = jax": r"`J = jax`",
    "jax.version.os": r"version\.os",
    "jax.version.pathlib": r"version\.pathlib",
    "jax.version.subprocess": r"version\.subprocess",
    "subscript": r"subscript",
    "match class pattern": r"`match` class pattern",
    "lambda": r"lambda",
    "default argument": r"default argument",
    "decorator": r"decorator",
    "f-string": r"f-string",
    "walrus": r"walrus",
    "top-level attribute chain": r"top-level",
    "exec reached as an attribute": r"exec",
    "marker in /tmp": r"marker file in /tmp|marker in /tmp|/tmp \(",
    "marker in the parent's cwd": r"/proc/<ppid>/cwd",
    "marker in HOME": r"\$HOME",
    "marker in ~/.cache/metarl": r"~/\.cache/metarl",
    "pytest temp dirs": r"/tmp/pytest-\*",
    "/proc/<ppid>/environ": r"/proc/<ppid>/environ",
    "/proc/1/environ": r"/proc/1/environ",
    "every /proc/*/environ": r"/proc/\*/environ",
    "/etc/shadow": r"/etc/shadow",
    "lists the parent's cwd": r"lists the parent's working directory",
    "sleep 300 subprocess": r"sleep 300",
    "exec -a renamed sleeper": r"exec -a",
    "python -c sleeper": r"python -c",
    "setsid / new session": r"setsid",
    "start_new_session": r"start_new_session",
    "double fork": r"double-fork",
    "inherited fds 3..20": r"inherited fds.*3\.\.20",
    "forged well-formed result, fitness 999": r"fitness 999",
    "forged non-object JSON": r"not objects",
    "forged truncated JSON": r"truncated JSON",
    "forged huge line": r"64 MB",
    "forged NaN": r"NaN",
    "forged unknown keys": r"unknown keys",
    "forged artifact": r"artifact",
    "leak in the exception text": r"raises an exception|exception message",
    "leak on stdout": r"stdout",
    "leak encoded past redaction": r"hex-encoded",
    "leak in warnings": r"warnings",
    "rewrite the cache": r"METARL_CACHE_DIR",
    "sqlite *.db": r"sqlite",
    "setns into the parent's netns": r"setns",
    "abstract unix socket": r"abstract",
    "filesystem unix socket": r"filesystem path",
    "import _socket via sys.modules": r"_socket.*modules|modules.*_socket",
    "TCP to 127.0.0.1": r"TCP",
    "kill the parent": r"os\.kill\(os\.getppid\(\), 9\)",
    "kill -9 every visible process": r"kill -9 every process",
    "96 MB in small files": r"96 MB",
    "jax_enable_x64": r"jax_enable_x64",
    "jax_default_matmul_precision": r"jax_default_matmul_precision",
    "Python infinite loop at trace time": r"infinite loop",
    "multi-million-step trace-time loop": r"multi-million-step",
    "shape-gated": r"shape-gated",
    "export-gated": r"per-element export",
    "call-count via mutable default": r"call-count-gated.*mutable default",
    "call-count via module-level list": r"call-count-gated.*module-level list",
    "step-gated optimizer": r"step-gated",
    "hand-made controller on real shapes": r"hand-made controller",
    "cross-tensor norm through a module list": r"cross-tensor",
    "NaN in optimizer state": r"NaN and inf in the optimizer state",
    "ANSI escapes": r"ANSI",
    "exception built from env and files": r"builds the exception message",
}


def attack_text() -> str:
    return "\n".join(header(p).get("attack", "") for p in FILES)


# --- the world ----------------------------------------------------------------------------------
def tree_bytes(root: Path) -> dict[str, bytes]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


def cache_bytes(cache: Path) -> dict[str, bytes]:
    """`tree_bytes` of the cache without the parent's in-flight commits: xla_cache writes an
    entry as `xla/.staged-*.tmp` and renames it into place, so another evaluation running
    beside this one (the parallel files) can leave one for an instant; it is never read."""
    return {
        name: data
        for name, data in tree_bytes(cache).items()
        if not (
            name.startswith("xla/")
            and Path(name).name.startswith(".staged-")
            and name.endswith(".tmp")
        )
    }


def stems_in(text: str) -> set[str]:
    return set(TAG.findall(text))


class World:
    """The parent's side of the sandbox: canaries, victims, listeners, and their inspection."""

    def __init__(self, cwd: Path, cache: Path, basetemp: Path):
        self.token = secrets.token_hex(16)
        self.canary = f"canary-{self.token}"
        self.cwd = cwd
        self.cache = cache
        self.basetemp = basetemp
        self.home = Path(os.path.expanduser("~"))
        self.home_cache = self.home / ".cache" / "metarl"
        self.lock = threading.Lock()
        self.hits: list[str] = []
        self.listeners: list[socket.socket] = []
        self.sleeper: subprocess.Popen | None = None
        self.damage: dict[str, list[str]] = {}
        self.shadow = self._shadow_lines()
        self.closed = False

    # -- setting up ------------------------------------------------------------------------------
    @staticmethod
    def _shadow_lines() -> list[str]:
        try:
            return [
                line
                for line in Path("/etc/shadow").read_text().splitlines()
                if line.count(":") >= 2
            ]
        except OSError:
            return []

    def environment(self) -> dict[str, str]:
        return {
            "METARL_HOSTILE_API_KEY": self.canary,
            "OPENAI_API_KEY": f"sk-{self.canary}",
            "METARL_HOSTILE_CANARY": self.canary,  # a name that no redaction looks for
            "METARL_HOSTILE_PORT": str(self.port),
            "METARL_HOSTILE_UNIX": str(self.unix_path),
            "METARL_HOSTILE_ABSTRACT": self.abstract[1:],
        }

    def start(self) -> None:
        (self.cwd / f"secret-{self.canary}.txt").write_text(f"api_key = {self.canary}\n")
        self.db = self.cwd / "metarl.db"
        connection = sqlite3.connect(self.db)
        connection.execute("create table candidates (id text, fitness real, source text)")
        connection.execute("insert into candidates values ('cand-1', 0.93, ?)", (self.canary,))
        connection.commit()
        connection.close()
        self.db_bytes = self.db.read_bytes()
        self._listen()
        self.cwd_entries = set(os.listdir(self.cwd))
        self.cache_snapshot = cache_bytes(self.cache)
        self.home_entries = set(os.listdir(self.home)) if self.home.is_dir() else set()
        self.home_cache_existed = self.home_cache.is_dir()
        self.home_cache_entries = (
            set(os.listdir(self.home_cache)) if self.home_cache_existed else set()
        )

    def _listen(self) -> None:
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.bind(("127.0.0.1", 0))
        self.port = tcp.getsockname()[1]
        self.unix_path = self.cwd / "hostile.sock"
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.bind(str(self.unix_path))
        self.abstract = f"\0metarl-hostile-listener-{self.token}"
        abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        abstract.bind(self.abstract)
        sockets = [tcp, unix, abstract]
        fixed = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:  # the name a candidate guesses without reading any environment
            fixed.bind("\0metarl-hostile-listener")
            sockets.append(fixed)
        except OSError:
            fixed.close()
        for sock in sockets:
            sock.listen(16)
            sock.settimeout(0.5)
            self.listeners.append(sock)
            threading.Thread(target=self._accept, args=(sock,), daemon=True).start()

    def _accept(self, sock: socket.socket) -> None:
        while not self.closed:
            try:
                connection, peer = sock.accept()
            except (socket.timeout, OSError):
                continue
            try:
                connection.settimeout(1.0)
                data = connection.recv(200)
            except OSError:
                data = b""
            finally:
                connection.close()
            with self.lock:
                self.hits.append(
                    f"a connection reached the test's listener {sock.getsockname()!r}: {data!r}"
                )

    def start_sleeper(self) -> None:
        # its exec-time environment holds the canaries: /proc/<pid>/environ shows them
        self.sleeper = subprocess.Popen(
            ["sleep", "600"],
            env=dict(os.environ),
            cwd=self.cwd,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def close(self) -> None:
        self.sweep()
        self.closed = True
        for sock in self.listeners:
            sock.close()
        if self.sleeper is not None and self.sleeper.poll() is None:
            self.sleeper.kill()
            self.sleeper.wait()

    # -- inspecting ------------------------------------------------------------------------------
    def marker_paths(self) -> list[str]:
        patterns = [
            f"/tmp/{MARKER}*",
            f"{self.home}/{MARKER}*",
            f"{self.home_cache}/{MARKER}*",
            f"{self.basetemp}/{MARKER}*",
            f"{self.basetemp}/*/{MARKER}*",
            f"{self.basetemp}/*/*/{MARKER}*",
            f"/tmp/pytest-of-*/pytest-*/{MARKER}*",
            f"/tmp/pytest-of-*/pytest-*/*/{MARKER}*",
        ]
        found = set()
        for pattern in patterns:
            found.update(glob.glob(pattern))
        return sorted(found)

    def marker_processes(self) -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter(["pid", "cmdline", "status"]):
            try:
                if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
                    continue
                if MARKER in " ".join(proc.info["cmdline"] or []):
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    def inspect(self, stem: str | None, running: set[str] = frozenset()) -> None:
        """Record (in self.damage) and repair what escaped.

        Tagged items go to their file (skipped while that file is still being evaluated);
        untagged ones to `stem` (None: "unattributed")."""
        owner = stem or "(unattributed)"

        def blame(text: str, tagged_stems: set[str]) -> bool:
            stems = tagged_stems or {owner}
            if stems & running:
                return False
            for s in stems:
                self.damage.setdefault(s, []).append(text)
            return True

        # processes, with a grace period for a teardown still under way
        deadline = time.monotonic() + 3.0
        while True:
            procs = [
                p
                for p in self.marker_processes()
                if not (stems_in(" ".join(p.info["cmdline"] or [])) & running)
            ]
            if not procs or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        for proc in procs:
            cmdline = " ".join(proc.info["cmdline"] or [])
            if blame(f"process {proc.pid} survived: {cmdline[:200]}", stems_in(cmdline)):
                try:
                    proc.kill()
                except psutil.Error:
                    pass
        for path in self.marker_paths():
            if blame(f"marker outside the sandbox: {path}", stems_in(path)):
                shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else _unlink(path)
        for name in sorted(set(os.listdir(self.cwd)) - self.cwd_entries):
            if blame(f"new file in the parent's cwd: {name}", stems_in(name)):
                path = self.cwd / name
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else _unlink(path)
        if self.home_cache.is_dir():
            if not self.home_cache_existed:
                blame(f"{self.home_cache} was created", set())
            for name in sorted(set(os.listdir(self.home_cache)) - self.home_cache_entries):
                if blame(f"new file in {self.home_cache}: {name}", stems_in(name)):
                    _unlink(self.home_cache / name)
        # the cache, byte for byte; trainers (which never run candidate Python, and which no
        # tracer can reach: tests/test_sandbox.py) may only *add* compiled programs under xla/
        # and the parent the call sizes they traced under call-sizes/ (never change either)
        now = cache_bytes(self.cache)
        added = ("xla/", "call-sizes/")
        self.cache_snapshot.update(
            {k: v for k, v in now.items() if k.startswith(added) and k not in self.cache_snapshot}
        )
        if now != self.cache_snapshot:
            changed = sorted(
                k
                for k in set(now) | set(self.cache_snapshot)
                if now.get(k) != self.cache_snapshot.get(k)
            )
            blame(f"the baseline cache changed: {changed[:10]}", set())
            for name in set(now) - set(self.cache_snapshot):
                _unlink(self.cache / name)
            for name, data in self.cache_snapshot.items():
                (self.cache / name).parent.mkdir(parents=True, exist_ok=True)
                (self.cache / name).write_bytes(data)
        if not self.db.exists() or self.db.read_bytes() != self.db_bytes:
            blame("the sqlite archive in the parent's cwd changed", set())
            self.db.write_bytes(self.db_bytes)
        if self.sleeper is None or self.sleeper.poll() is not None:
            blame("the sacrificial sleep was killed", set())
            self.start_sleeper()
        with self.lock:
            hits, self.hits = self.hits, []
        for hit in hits:
            blame(hit, stems_in(hit))
        if not psutil.pid_exists(os.getpid()):
            blame("the test process is gone", set())

    def sweep(self) -> None:
        """Final cleanup: everything tagged or untagged, attributed by tag."""
        self.inspect(None)

    # -- the outcome -----------------------------------------------------------------------------
    def leaks(self, text: str) -> list[str]:
        token = self.token
        lowered = text.lower()
        found = []
        if token in lowered:
            found.append("canary")
        if token[::-1] in lowered:
            found.append("canary reversed")
        alnum = re.sub(r"[^0-9a-z]", "", lowered)
        if token not in lowered and (token in alnum or token[::-1] in alnum):
            found.append("canary with separators")
        if token.encode().hex() in alnum:
            found.append("canary hex-encoded")
        for run in re.findall(r"[A-Za-z0-9+/]{16,}={0,2}", text):
            for offset in range(4):
                chunk = run[offset:]
                chunk = chunk[: len(chunk) - len(chunk) % 4]
                try:
                    decoded = base64.b64decode(chunk, validate=True).decode("latin-1").lower()
                except (binascii.Error, ValueError):
                    continue
                if token in decoded:
                    found.append("canary base64-encoded")
                    break
        found += [
            f"/etc/shadow line {line.split(':')[0]!r}" for line in self.shadow if line in text
        ]
        return sorted(set(found))


def _unlink(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


@pytest.fixture(scope="module")
def corpus_cache(tmp_path_factory):
    """A METARL_CACHE_DIR of the corpus's own: the shared one (tests/conftest.py) is written by
    the other workers' tests while the world watches this one for changes."""
    path = tmp_path_factory.mktemp("hostile-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("METARL_CACHE_DIR", str(path))
        yield path


@pytest.fixture(scope="module")
def world(corpus_cache, tmp_path_factory):
    """The world, with the corpus's baselines trained first (so the cache must not change)."""
    with Evaluator(CascadeSettings(**BASE), workers=1, prewarm=False) as evaluator:
        evaluator.references("drift")
        evaluator.references("optimizer")
    assert list((corpus_cache / "baselines").glob("*.json")), "the baselines were not cached"
    the_world = World(
        tmp_path_factory.mktemp("hostile-cwd"), corpus_cache, tmp_path_factory.getbasetemp()
    )
    with pytest.MonkeyPatch.context() as patch:
        the_world.start()
        for key, value in the_world.environment().items():
            patch.setenv(key, value)
        patch.chdir(the_world.cwd)
        the_world.start_sleeper()
        the_world.inspect(None)  # nothing yet: anything here is a stale leftover
        the_world.damage.clear()
        try:
            yield the_world
        finally:
            the_world.close()


# --- running the corpus ---------------------------------------------------------------------------
@dataclass
class Run:
    outcome: object = None
    error: str | None = None
    elapsed: float = 0.0
    settings: CascadeSettings = field(default_factory=lambda: CascadeSettings(**BASE))


def evaluate(path: Path, evaluator: Evaluator | None) -> Run:
    fields = header(path)
    settings = CascadeSettings(**{**BASE, **fields["settings"]})
    run = Run(settings=settings)
    start = time.perf_counter()
    try:
        if evaluator is not None:
            run.outcome = evaluator.evaluate(path.read_text(), fields["task"])
        else:
            run.outcome = evaluate_source(path.read_text(), fields["task"], settings)
    except Exception:  # evaluate must never raise for anything a candidate does
        run.error = traceback.format_exc()[-3000:]
    run.elapsed = time.perf_counter() - start
    return run


@pytest.fixture(scope="module")
def parallel_runs(world):
    """The run: parallel files, two at a time through one Evaluator, each inspected as it ends."""
    runs: dict[str, Run] = {}
    running: set[str] = set()

    def one(path: Path) -> None:
        with world.lock:
            running.add(path.stem)
        try:
            run = evaluate(path, evaluator)
        finally:
            with world.lock:
                running.discard(path.stem)
                others = set(running)
        runs[path.stem] = run
        with inspection:
            world.inspect(path.stem, running=others)

    inspection = threading.Lock()
    with Evaluator(CascadeSettings(**BASE), workers=2) as evaluator:
        with ThreadPoolExecutor(2) as threads:
            list(threads.map(one, PARALLEL))
    world.sweep()
    return runs


def check(world: World, path: Path, run: Run) -> list[str]:
    """Every way in which `run` of `path` was not contained."""
    fields = header(path)
    problems = [f"escaped: {d}" for d in world.damage.get(path.stem, [])]
    if run.error is not None:
        problems.append(f"evaluate raised instead of returning an Outcome:\n{run.error}")
        problems += [f"leak in the exception: {leak}" for leak in world.leaks(run.error)]
        return problems
    outcome = run.outcome
    dumped = json.dumps(outcome.to_dict())
    texts = [dumped, outcome.reason or "", outcome.stdout or "", *outcome.warnings]
    problems += [
        f"leak in the Outcome: {leak}"
        for leak in sorted({leak for t in texts for leak in world.leaks(t)})
    ]
    if outcome.fitness is not None and not outcome.fitness < FITNESS_CEILING:
        problems.append(f"fitness {outcome.fitness} >= {FITNESS_CEILING}: not an honest score")
    if outcome.passed and (outcome.fitness is None or not math.isfinite(outcome.fitness)):
        problems.append(f"passed with fitness {outcome.fitness}")
    if fields["expect"] == "fail" and outcome.passed:
        problems.append(f"passed (fitness {outcome.fitness}) but was expected to fail")
    if (
        fields["expect"] == "fail"
        and fields.get("expect-reason")
        and fields["expect-reason"] not in (outcome.reason or "")
    ):
        problems.append(
            f"reason lacks {fields['expect-reason']!r}: {(outcome.reason or '')[:500]!r}"
        )
    if not outcome.passed and not outcome.reason:
        problems.append("failed without a reason")
    for key in ("tracer_workdir", "workdir"):  # the sandbox's own temp dirs are gone too
        where = (outcome.sandbox or {}).get(key)
        if where and os.path.exists(where):
            problems.append(f"the sandbox left its temp dir behind: {key} {where}")
    limit = run.settings.trace_timeout_s + run.settings.timeout_s + SLACK_S
    if run.elapsed >= limit:
        problems.append(f"took {run.elapsed:.1f} s, limit {limit:g} s")
    for name, text in (
        ("reason", outcome.reason or ""),
        ("stdout", outcome.stdout or ""),
        *(("warning", w) for w in outcome.warnings),
    ):
        if CONTROL.search(text):
            problems.append(f"{name} carries control characters: {CONTROL.findall(text)[:10]!r}")
    return problems


# --- the tests ----------------------------------------------------------------------------------
def test_corpus_is_big_well_formed_and_covers_every_attack():
    assert len(FILES) >= 30
    for path in FILES:
        fields = header(path)
        assert fields.get("task") in ("drift", "optimizer"), path.name
        assert fields.get("expect") in ("fail", "honest"), path.name
        assert fields.get("attack") and fields.get("contained"), path.name
        assert fields["run"] in ("parallel", "alone", "alone-last"), path.name
        assert re.fullmatch(r"[a-z0-9_]+", path.stem), path.name
        # every tag a file writes names the file itself (attribution)
        assert stems_in(path.read_text()) <= {path.stem}, path.name
    text = attack_text()
    missing = [
        name for name, pattern in REQUIRED_ATTACKS.items() if not re.search(pattern, text, re.I)
    ]
    assert not missing, f"attack patterns not covered: {missing}"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_hostile_candidate_passes_the_static_check(path):
    """Every attack really executes: stage 1 lets it through (it is not the boundary)."""
    fields = header(path)
    report = check_task_source(path.read_text(), get_task(fields["task"]))
    assert report.ok, report.reason


def test_world_is_ready(world):
    assert world.sleeper.poll() is None
    assert os.getcwd() == str(world.cwd)
    assert os.environ["METARL_HOSTILE_API_KEY"] == world.canary
    assert world.cache_snapshot, "the baseline cache is empty"


@pytest.mark.parametrize("path", ORDERED, ids=[p.stem for p in ORDERED])
def test_hostile_candidate_is_contained(path, world, request):
    if path in PARALLEL:
        run = request.getfixturevalue("parallel_runs")[path.stem]
    else:
        world.inspect(None)  # leftovers of earlier files are not this file's doing
        try:
            run = evaluate(path, None)
        finally:
            world.inspect(path.stem)
    problems = check(world, path, run)
    if os.environ.get("HOSTILE_REPORT_FILE"):  # a JSON line per file, for a human to read
        with open(os.environ["HOSTILE_REPORT_FILE"], "a") as report:
            outcome = run.outcome
            report.write(
                json.dumps(
                    {
                        "file": path.stem,
                        "problems": problems,
                        "elapsed": round(run.elapsed, 1),
                        "passed": getattr(outcome, "passed", None),
                        "stage": getattr(outcome, "stage", None),
                        "fitness": getattr(outcome, "fitness", None),
                        "reason": getattr(outcome, "reason", None),
                        "stdout": (getattr(outcome, "stdout", None) or "")[:2000],
                    }
                )
                + "\n"
            )
    summary = (
        ""
        if run.outcome is None
        else (
            f"\n[passed={run.outcome.passed} stage={run.outcome.stage} "
            f"fitness={run.outcome.fitness} "
            f"elapsed={run.elapsed:.1f}s reason={(run.outcome.reason or '')[:600]!r}]"
        )
    )
    assert not problems, "\n".join(problems) + summary
