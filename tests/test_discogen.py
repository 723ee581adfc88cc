"""DiscoGen interop: a candidate written as DiscoGen's module, exported as DiscoGen's task, and
(slow, where a DiscoGen runtime exists) run by DiscoGen's own harness.

The module tests run here on any Python: the exported modules need only jax and optax. The
runtime tests need an interpreter with DiscoGen 1.3.0 (Python >= 3.12):
`$METARL_DISCOGEN_PYTHON`, else `.venv-discogen/bin/python` (scripts/discogen-runtime.sh,
which CI runs before the slow tier); without one they skip and say why.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import flax.linen as flax_nn
import jax
import jax.numpy as jnp
import optax
import pytest
from conftest import invoke

from metarl.archives import Archive
from metarl.archives.external import external_evaluations
from metarl.discogen.harness import DiscoGenHarness
from metarl.discogen.modules import NotExportable, module_source
from metarl.discogen.runtime import RUNTIME_ENVVAR, DiscoGenUnavailable, Runtime, find_runtime
from metarl.discogen.task import ExportError, TaskManifest, discogen_env, export_task
from metarl.tasks import get_task
from metarl.tasks.candidate import source_hash
from metarl.tasks.optimizer.plug import rule_optimizer

REPO = Path(__file__).resolve().parent.parent
PPO_CLIP = get_task("drift").seed_program("ppo_clip").source
ADAM = get_task("optimizer").seed_program("adam").source
TINY = {"NUM_ENVS": 8, "NUM_STEPS": 32, "TOTAL_TIMESTEPS": 2048}

pytestmark = pytest.mark.usefixtures("restore_logging")


def load_module(text: str, path: Path):
    """Import the module `text` (written to `path`) as DiscoGen would import it."""
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the drift as DiscoGen's loss.py ------------------------------------------------------------
class Categorical(NamedTuple):
    """The two methods DiscoGen's loss calls on its policy (distrax's Categorical)."""

    logits: jax.Array

    def log_prob(self, action):
        logp = jax.nn.log_softmax(self.logits)
        return jnp.take_along_axis(logp, action[:, None], axis=-1)[:, 0]

    def entropy(self):
        logp = jax.nn.log_softmax(self.logits)
        return -(jnp.exp(logp) * logp).sum(-1)


class ActorCritic(flax_nn.Module):
    @flax_nn.compact
    def __call__(self, obs):
        return Categorical(flax_nn.Dense(4)(obs)), flax_nn.Dense(1)(obs)[:, 0]


class Transition(NamedTuple):
    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array


def loss_inputs():
    """A minibatch whose policy has moved off the one that collected it (ratios away from 1)."""
    keys = jax.random.split(jax.random.PRNGKey(0), 6)
    network = ActorCritic()
    obs = jax.random.normal(keys[0], (256, 10))
    old = network.init(keys[1], obs)
    pi, value = network.apply(old, obs)
    action = jax.random.categorical(keys[2], pi.logits)
    params = jax.tree.map(lambda p: p + 0.3 * jax.random.normal(keys[3], p.shape), old)
    batch = Transition(obs, action, pi.log_prob(action), value)
    gae = 3.0 * jax.random.normal(keys[4], (256,))
    targets = value + jax.random.normal(keys[5], (256,))
    config = {"CLIP_EPS": 0.2, "VF_COEF": 0.5, "ENT_COEF": 0.01}
    return params, batch, gae, targets, network, config


def ppo_loss(params, batch, gae, targets, network, config):
    """PPO's clipped loss as its paper writes it (min of the two surrogates)."""
    pi, value = network.apply(params, batch.obs)
    eps = config["CLIP_EPS"]
    clipped = batch.value + jnp.clip(value - batch.value, -eps, eps)
    value_loss = 0.5 * jnp.maximum((value - targets) ** 2, (clipped - targets) ** 2).mean()
    ratio = jnp.exp(pi.log_prob(batch.action) - batch.log_prob)
    adv = (gae - gae.mean()) / (gae.std() + 1e-8)
    actor = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - eps, 1 + eps) * adv).mean()
    entropy = pi.entropy().mean()
    total = actor + config["VF_COEF"] * value_loss - config["ENT_COEF"] * entropy
    return total, (value_loss, actor, entropy)


def test_ppo_clip_drift_as_discogens_loss_is_ppos_loss_and_gradient(tmp_path):
    module = load_module(module_source(PPO_CLIP, "drift"), tmp_path / "loss.py")
    inputs = loss_inputs()
    (ours, ours_aux), ours_grad = jax.value_and_grad(module.loss_actor_and_critic, has_aux=True)(
        *inputs
    )
    (ppo, ppo_aux), ppo_grad = jax.value_and_grad(ppo_loss, has_aux=True)(*inputs)
    assert float(ours) == pytest.approx(float(ppo), rel=1e-6)
    for a, b in zip(ours_aux, ppo_aux):
        assert float(a) == pytest.approx(float(b), rel=1e-6)
    for a, b in zip(jax.tree.leaves(ours_grad), jax.tree.leaves(ppo_grad)):
        assert jnp.allclose(a, b, rtol=1e-5, atol=1e-7)
    assert float(ppo_aux[1]) != 0.0  # the clip was active: ratios left [0.8, 1.2]


def test_a_candidate_cannot_rebind_the_wrappers_names(tmp_path):
    """The candidate runs first in the module; what it binds (the wrapper's private names, the
    loss itself) is rebound by the wrapper after it."""
    hostile = (
        PPO_CLIP
        + "\n_jnp = None\n_drift = None\n"
        + "def loss_actor_and_critic(*args):\n    return 0.0, (0.0, 0.0, 0.0)\n"
    )
    module = load_module(module_source(hostile, "drift"), tmp_path / "loss.py")
    total, _ = module.loss_actor_and_critic(*loss_inputs())
    assert float(total) == pytest.approx(float(ppo_loss(*loss_inputs())[0]), rel=1e-6)


def test_a_task_discogen_has_no_module_for_is_refused():
    with pytest.raises(NotExportable, match="no module for task 'lpg'; exportable: drift"):
        module_source("def f(): pass", "lpg")


# --- the update rule as DiscoGen's optim.py ----------------------------------------------------
def updates_over(transform, params, grads, steps):
    state = transform.init(params)
    out = []
    for step in range(steps):
        grad = jax.tree.map(lambda g, scale=1 + 0.5 * step: g * scale, grads)
        update, state = transform.update(grad, state, params)
        params = optax.apply_updates(params, update)
        out.append(update)
    return out


def rule_pair(tmp_path, source, lr=3e-3, total_steps=40):
    """DiscoGen's chain around the exported make_optimizer (its output times -lr, as its
    train.py does with SCHEDULE_LR off) and metarl's own rule_optimizer, both clipping first."""
    module = load_module(module_source(source, "optimizer"), tmp_path / "optim.py")
    config = {"NUM_UPDATES": 10, "UPDATE_EPOCHS": 2, "NUM_MINIBATCHES": 2, "MAX_GRAD_NORM": 0.5}
    discogen = optax.chain(module.make_optimizer(config)(), optax.scale(-lr))
    namespace = {"jnp": jnp, "jax": jax}
    exec(source, namespace)  # noqa: S102 - the repository's own seed programs
    ours = optax.chain(
        optax.clip_by_global_norm(0.5),
        rule_optimizer(namespace["optimizer"], lambda count: lr, total_steps=total_steps),
    )
    return discogen, ours


def test_adam_rule_as_discogens_optimizer_takes_metarls_steps(tmp_path):
    """The learning rate is applied outside the rule in DiscoGen: for a rule linear in lr
    (Adam) the steps are metarl's."""
    params = {"w": jnp.linspace(-1.0, 1.0, 12).reshape(3, 4), "b": jnp.zeros(4)}
    grads = {"w": jnp.sin(jnp.arange(12.0)).reshape(3, 4), "b": jnp.cos(jnp.arange(4.0))}
    discogen, ours = rule_pair(tmp_path, ADAM)
    for a, b in zip(updates_over(discogen, params, grads, 6), updates_over(ours, params, grads, 6)):
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
            assert jnp.allclose(x, y, rtol=1e-5, atol=1e-9)
            assert float(jnp.abs(x).max()) > 0


def test_a_rule_nonlinear_in_lr_is_not_exact_as_the_module_says(tmp_path):
    """lr ** 2 inside the rule: DiscoGen's lr * rule(lr=1) is another rule (documented)."""
    squared = "def optimizer(grad, param, momentum, state, step, progress, lr):\n"
    squared += "    return -(lr ** 2) * 100.0 * grad, state\n"
    params = {"w": jnp.ones(3)}
    grads = {"w": jnp.array([0.1, -0.2, 0.3])}
    discogen, ours = rule_pair(tmp_path, squared)
    a = updates_over(discogen, params, grads, 1)[0]["w"]
    b = updates_over(ours, params, grads, 1)[0]["w"]
    assert not jnp.allclose(a, b)
    assert jnp.allclose(a, b / 3e-3)  # off by exactly one factor of lr


# --- names, options, refusals ------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, expected",
    [("Breakout-MinAtar", "MinAtar/Breakout"), ("MinAtar/Asterix", "MinAtar/Asterix")],
)
def test_environment_names_map_to_discogens_ids(name, expected):
    assert discogen_env(name) == expected


def test_an_environment_without_a_discogen_id_is_refused():
    with pytest.raises(ExportError, match="no DiscoGen environment for 'CartPole-v1'"):
        discogen_env("CartPole-v1")


def test_export_never_writes_into_a_folder_that_has_files(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    runtime = Runtime("/nonexistent/python", "1.3.0", "3.12.1", ())  # never started
    with pytest.raises(ExportError, match="exists and is not an empty folder"):
        export_task(PPO_CLIP, "drift", tmp_path, runtime)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="DiscoGen can be installed here")
def test_on_python_311_without_a_runtime_export_says_so_in_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv(RUNTIME_ENVVAR, raising=False)
    seed = str(get_task("drift").seed_program("ppo_clip").path)
    result = invoke(
        "export", seed, "--task", "drift", "--format", "discogen", "-o", str(tmp_path / "t")
    )
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "DiscoGen is not available on Python 3.11" in result.stderr
    assert "scripts/discogen-runtime.sh" in result.stderr
    assert not (tmp_path / "t").exists()


def test_a_runtime_without_discogen_is_named_in_one_line():
    with pytest.raises(DiscoGenUnavailable, match="has no discogen package"):
        find_runtime(sys.executable if sys.version_info < (3, 12) else "/usr/bin/python3")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "TOTAL_TIMESTEPS"], "--set 'TOTAL_TIMESTEPS': give KEY=VALUE"),
        (["--set", "lr=1"], "give KEY=VALUE with DiscoGen's upper-case key"),
        (["--set", "LR=[1]"], "the value must be a number, True/False or a string"),
        ([], "--format discogen needs --output DIR"),
    ],
)
def test_export_options_are_checked_before_anything_runs(args, message):
    seed = str(get_task("drift").seed_program("ppo_clip").path)
    result = invoke("export", seed, "-t", "drift", "-f", "discogen", *args)
    assert result.exit_code == 2 and message in result.stderr, result.output


def test_discogen_options_belong_to_the_discogen_format():
    result = invoke("export", "r1", "--format", "csv", "--test")
    assert result.exit_code == 2
    assert "are options of --format discogen" in result.stderr


# --- DiscoGen's own harness (slow; needs a DiscoGen runtime) -----------------------------------
def discogen_python() -> str | None:
    """$METARL_DISCOGEN_PYTHON, else the checkout's .venv-discogen once its install finished."""
    if os.environ.get(RUNTIME_ENVVAR):
        return os.environ[RUNTIME_ENVVAR]
    venv = REPO / ".venv-discogen"
    installed = (venv / ".installed-discogen-1.3.0").exists()
    return str(venv / "bin" / "python") if installed else None


needs_runtime = pytest.mark.skipif(
    discogen_python() is None,
    reason="no DiscoGen runtime (bash scripts/discogen-runtime.sh, or $METARL_DISCOGEN_PYTHON)",
)


def run_main(root: Path, python: str) -> dict:
    """DiscoGen's run_main.py in `root`: its last JSON line."""
    done = subprocess.run(
        [python, "run_main.py"], cwd=root, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.harness
@needs_runtime
def test_exported_ppo_clip_gives_discogens_base_numbers_in_discogens_harness(tmp_path):
    """At a tiny config (8 envs x 32 steps x 8 updates, DiscoGen's 8 seeds x 10 rates), the
    task whose loss.py is our PPO-clip drift returns what DiscoGen's own base task returns."""
    python = discogen_python()
    runtime = find_runtime(python)
    base_dir, ours_dir = tmp_path / "base", tmp_path / "ours"
    envs = ("Breakout-MinAtar",)
    export_task(None, "drift", base_dir, runtime, envs=envs, config=TINY)
    manifest = export_task(PPO_CLIP, "drift", ours_dir, runtime, envs=envs, config=TINY)
    assert manifest == TaskManifest.read(ours_dir)
    assert manifest.envs == ("MinAtar/Breakout",) and manifest.config == TINY
    linked = ours_dir / "MinAtar" / "Breakout" / "loss.py"
    assert linked.is_symlink() and linked.resolve() == (ours_dir / "discovered" / "loss.py")
    base, ours = run_main(base_dir, python), run_main(ours_dir, python)
    assert base["errors"] == {} and ours["errors"] == {}
    (base_scores,) = base["results"].values()
    (our_scores,) = ours["results"].values()
    assert our_scores["return_mean"] == pytest.approx(base_scores["return_mean"], abs=1e-6)
    assert our_scores["return_std"] == pytest.approx(base_scores["return_std"], abs=1e-6)


@pytest.mark.harness
@needs_runtime
def test_export_command_writes_the_test_side_around_the_candidate(tmp_path):
    python = discogen_python()
    seed = str(get_task("drift").seed_program("ppo_clip").path)
    out = tmp_path / "task"
    result = invoke(
        *("export", seed, "-t", "drift", "-f", "discogen", "-o", str(out), "--test"),
        *("--discogen-python", python, "--set", "TOTAL_TIMESTEPS=4096"),
    )
    assert result.exit_code == 0, result.output
    manifest = TaskManifest.read(out)
    assert manifest.side == "test"
    assert manifest.envs == ("MinAtar/Asterix", "MinAtar/SpaceInvaders")
    for game in ("Asterix", "SpaceInvaders"):
        assert (out / "MinAtar" / game / "loss.py").resolve() == out / "discovered" / "loss.py"
        assert (
            "config.update({'TOTAL_TIMESTEPS': 4096})"
            in (out / "MinAtar" / game / "config.py").read_text()
        )
    assert not (out / "MinAtar" / "Breakout").exists()
    assert "# ---- the candidate ----" in (out / "discovered" / "loss.py").read_text()


# --- DiscoGen's harness inside metarl's sandbox (metarl evaluate --harness discogen) -----------
def test_the_harness_applies_metarls_static_check_before_discogen_runs_anything(tmp_path):
    hostile = "import os\ndef drift(ratio, advantage, epsilon):\n    return ratio * 0.0\n"
    runtime = Runtime("/nonexistent/python", "1.3.0", "3.12.1", ())  # never started
    outcome = DiscoGenHarness(runtime).evaluate(hostile, "drift")
    assert not outcome.passed and outcome.stage == "static"
    assert outcome.reason.startswith("static check: line 1: import of `os` is not allowed")
    assert outcome.games == () and outcome.fitness is None


@pytest.mark.parametrize(
    "args, message",
    [
        (["--harness", "nope"], "unknown harness 'nope'; choose one of: metarl, discogen"),
        (["--test"], "--test, --set, --discogen-python and --no-record are options of --harness"),
        (["--harness", "discogen", "--seeds", "2"], "DiscoGen fixes its own seeds"),
        (["--harness", "discogen", "-t", "optimizer", "--meta", "rl2"], "DiscoGen fixes"),
    ],
)
def test_harness_options_are_checked_before_anything_runs(args, message):
    seed = str(get_task("drift").seed_program("ppo_clip").path)
    task = [] if "-t" in args else ["-t", "drift"]
    result = invoke("evaluate", seed, *task, *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and result.stderr.strip().count("\n") == 0


@pytest.mark.harness
@needs_runtime
def test_ppo_clip_in_discogens_harness_scores_one_against_discogens_base(tmp_path):
    """In the sandbox, at a tiny config: the PPO-clip drift's numbers are the base's."""
    seed = str(get_task("drift").seed_program("ppo_clip").path)
    result = invoke(
        *("evaluate", seed, "-t", "drift", "--harness", "discogen", "--json"),
        *("--envs", "Breakout-MinAtar", "--discogen-python", discogen_python()),
        *(item for key, value in TINY.items() for item in ("--set", f"{key}={value}")),
        *("--archive", str(tmp_path / "metarl.db")),
    )
    assert result.exit_code == 0, result.output
    outcome = json.loads(result.stdout)
    with Archive(tmp_path / "metarl.db", must_exist=True) as archive:
        (archived,) = external_evaluations(archive, [source_hash(PPO_CLIP)])
    assert archived.id == outcome["archived"] and archived.fitness == 1.0
    assert archived.protocol == outcome["protocol"] and archived.release == "1.3.0"
    assert outcome["passed"] and outcome["isolation"] == "bubblewrap"
    (game,) = outcome["games"]
    assert game["env"] == "MinAtar/Breakout"
    assert game["candidate"] == game["base"] and game["normalised"] == 1.0
    assert outcome["fitness"] == 1.0
    assert outcome["protocol"]["config"] == TINY and outcome["protocol"]["side"] == "train"


@pytest.mark.harness
@needs_runtime
def test_a_drift_that_never_finishes_is_stopped_by_the_stage_limit(tmp_path):
    """A drift that passes the static check and loops for ~forever inside the jitted update:
    DiscoGen has no time limit of its own; metarl's wall clock stops it, the base is scored."""
    hostile = tmp_path / "slow_drift.py"
    hostile.write_text(
        "def drift(ratio, advantage, epsilon):\n"
        "    spin = lax.fori_loop(0, 2**31 - 1, lambda i, x: x * 1.0000001, ratio)\n"
        "    return jnp.where(spin >= 0.0, (ratio - 1.0) ** 2, 0.0)\n"
    )
    result = invoke(
        *("evaluate", str(hostile), "-t", "drift", "--harness", "discogen", "--json"),
        *("--envs", "Breakout-MinAtar", "--discogen-python", discogen_python()),
        *("--set", "TOTAL_TIMESTEPS=256", "--set", "NUM_ENVS=8", "--set", "NUM_STEPS=32"),
        *("--timeout", "240", "--no-record"),
    )
    assert result.exit_code == 1, result.output
    outcome = json.loads(result.stdout)
    assert outcome["stage"] == "harness"
    assert outcome["reason"] == "stopped by the sandbox: wall-clock limit of 240 s"
