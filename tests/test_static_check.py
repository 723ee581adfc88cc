"""Stage 1: the static check accepts the seeds and refuses everything outside the contract."""

from __future__ import annotations

import pytest

from metarl.evaluation.static_check import (
    MAX_SOURCE_BYTES,
    check_source,
    check_task_source,
    parameters_of,
)
from metarl.tasks import get_task, task_names

DRIFT = ("drift", ["ratio", "advantage", "epsilon"])
GOOD_BODY = (
    "    return jax.nn.relu((ratio - jnp.clip(ratio, 1 - epsilon, 1 + epsilon)) * advantage)\n"
)


def drift_source(body: str = GOOD_BODY, prefix: str = "") -> str:
    return f"{prefix}def drift(ratio, advantage, epsilon):\n{body}"


def check(source: str):
    return check_source(source, *DRIFT)


@pytest.mark.parametrize("task_name", task_names())
def test_every_seed_passes_its_tasks_static_check(task_name):
    task = get_task(task_name)
    for seed in task.seed_programs():
        report = check_task_source(seed.source, task)
        assert report.ok, f"{seed.path}: {report.reason}"


def test_parameters_are_read_from_the_signature():
    assert parameters_of("drift(ratio, advantage, epsilon) -> array") == (
        "drift",
        ["ratio", "advantage", "epsilon"],
    )
    name, params = parameters_of(get_task("optimizer").signature)
    assert name == "optimizer" and params[0] == "grad" and params[-1] == "lr" and len(params) == 7


@pytest.mark.parametrize(
    "source",
    [
        drift_source(),
        drift_source(
            prefix="import jax\nimport jax.numpy as jnp\nfrom jax import lax, nn\nimport math\n"
        ),
        drift_source(
            prefix='"""A docstring."""\nALPHA = 2.0\nBETA = -ALPHA * math.pi\nPAIR = (1, 2)\n'
        ),
        # helpers, lambdas, comprehensions, loops, try, jnp/lax/nn attribute use, debug printing
        "def helper(x, scale=2.0):\n    return nn.softplus(x) * scale\n\n"
        "def drift(ratio, advantage, epsilon):\n"
        "    terms = [helper(ratio - 1.0) * k for k in range(2)]\n"
        "    total = lax.fori_loop(0, 3, lambda i, acc: acc + 0.0, sum(terms))\n"
        "    for power in (1, 2):\n        total = total + jnp.abs(ratio - 1.0) ** power\n"
        "    try:\n        total = total * 1.0\n    except ValueError:\n        pass\n"
        "    jax.debug.print('drift {x}', x=total.mean())\n"
        "    return jnp.where(advantage > 0, total, jnp.linalg.norm(ratio) * 0.0)\n",
        drift_source("    out = ratio.at[0].set(1.0)\n    return jnp.square(out - 1.0)\n"),
    ],
)
def test_accepts_legitimate_programs(source):
    report = check(source)
    assert report.ok, report.reason


@pytest.mark.parametrize(
    "source, reason",
    [
        ("def drift(ratio, advantage, epsilon)\n    return ratio\n", "SyntaxError"),
        ("", "the source is empty"),
        ("X = 1.0\n", "must define a top-level function `drift(ratio, advantage, epsilon)`"),
        (drift_source() + "\n" + drift_source(), "`drift` is defined 2 times"),
        (
            "def drift(ratio, advantage):\n    return ratio\n",
            "expected `def drift(ratio, advantage, epsilon)`",
        ),
        (
            "def drift(ratio, advantage, eps):\n    return ratio\n",
            "got `def drift(ratio, advantage, eps)`",
        ),
        ("def drift(ratio, advantage, epsilon, *rest):\n    return ratio\n", "*rest"),
        ("def drift(ratio, advantage, epsilon):\n    x = ratio\n", "never returns a value"),
        (drift_source(prefix="import os\n"), "import of `os` is not allowed"),
        (drift_source(prefix="import jax.random\n"), "import of `jax.random` is not allowed"),
        (drift_source(prefix="from math import *\n"), "import *"),
        (drift_source(prefix="from . import x\n"), "relative imports"),
        (drift_source("    import math\n" + GOOD_BODY), "imports are allowed only at the top"),
        (drift_source("    return ratio.__class__\n"), "access to `__class__` is not allowed"),
        (drift_source("    return __builtins__\n"), "`__builtins__` is not allowed"),
        (drift_source("    _x = ratio\n    return _x\n"), "the name `_x` is not allowed"),
        (drift_source("    return jnp._src\n"), "access to `_src` is not allowed"),
        (drift_source("    return exec('1')\n"), "`exec` is not allowed"),
        (drift_source("    return compile('1', 'x', 'eval')\n"), "`compile` is not allowed"),
        (drift_source("    return globals()\n"), "`globals` is not allowed"),
        (drift_source("    return vars(jnp)\n"), "`vars` is not allowed"),
        (
            drift_source("    setattr(jnp, 'tanh', None)\n    return ratio\n"),
            "`setattr` is not allowed",
        ),
        (drift_source("    return type(ratio)\n"), "`type` is not allowed"),
        (drift_source("    return input()\n"), "`input` is not allowed"),
        (drift_source("    breakpoint()\n    return ratio\n"), "`breakpoint` is not allowed"),
        (drift_source("    return jnp.load('weights.npy')\n"), "`jax.numpy.load` is not allowed"),
        (drift_source("    return ratio.tofile('x')\n"), "`tofile` is not allowed"),
        (
            drift_source("    return jax.profiler.start_trace('x')\n"),
            "`jax.profiler` is not allowed",
        ),
        (
            drift_source("    return jax.experimental.io_callback(None, None)\n"),
            "`jax.experimental` is not allowed",
        ),
        (
            drift_source("    return jax.debug.callback(None)\n"),
            "`jax.debug.callback` is not allowed",
        ),
        (drift_source("    return jax.clear_caches()\n"), "`jax.clear_caches` is not allowed"),
        (drift_source("    return jax.devices()\n"), "of `jax` a candidate may use only"),
        (drift_source("    j = jax\n    return j.config\n"), "`config` is not allowed"),
        (drift_source("    return '{0.real}'.format(ratio)\n"), "`format` is not allowed"),
        (drift_source("    return 'x__y'\n"), "string constants containing `__`"),
        (
            drift_source("    jnp.tanh = jnp.abs\n    return ratio\n"),
            "assigning or deleting attributes",
        ),
        (drift_source("    del jnp.tanh\n    return ratio\n"), "assigning or deleting attributes"),
        ("jnp.tanh = jnp.abs\n" + drift_source(), "modules cannot be patched"),
        ("jax.numpy.__dict__['tanh'] = None\n" + drift_source(), "modules cannot be patched"),
        (drift_source("    global X\n" + GOOD_BODY), "`global` statements"),
        (
            "def outer():\n    x = 1\n    def inner():\n        nonlocal x\n        return x\n    "
            "return inner\n" + drift_source(),
            "`nonlocal` statements",
        ),
        (drift_source("    class A:\n        pass\n" + GOOD_BODY), "class definitions"),
        (drift_source("    yield ratio\n" + GOOD_BODY), "generators"),
        (drift_source("    with ratio:\n        pass\n" + GOOD_BODY), "`with` statements"),
        ("async def drift(ratio, advantage, epsilon):\n    return ratio\n", "`async def`"),
        ("@jax.jit\n" + drift_source(), "decorators are not allowed"),
        ("def helper(x, y=jnp.zeros(3)):\n    return x\n" + drift_source(), "must be constants"),
        ("X = jnp.zeros(3)\n" + drift_source(), "top-level assignments may only bind constants"),
        (
            "print('hello')\n" + drift_source(),
            "top-level statement `print('hello')` is not allowed",
        ),
        (
            "for i in range(3):\n    pass\n" + drift_source(),
            "top-level statement `for i in range(3):`",
        ),
        (
            drift_source("    return np.abs(ratio)\n"),
            "name `np` is not defined (numpy is not available",
        ),
        (drift_source("    return torch.abs(ratio)\n"), "name `torch` is not defined"),
        (drift_source("    return open\n"), "`open` is not allowed"),
        (
            drift_source("    g = (x for x in [1])\n    return g.gi_frame.f_back\n"),
            "`gi_frame` is not allowed",
        ),
        (drift_source("    return ratio.mro()\n"), "`mro` is not allowed"),
    ],
)
def test_refuses_with_a_specific_reason(source, reason):
    report = check(source)
    assert not report.ok
    assert reason in report.reason, report.reason


def test_reason_names_the_line():
    report = check("import jax\n\n" + drift_source("    x = ratio\n    return ratio.__dict__\n"))
    assert report.line == 5
    assert report.reason.startswith("line 5: ")


def test_source_size_is_bounded():
    padding = "# " + "x" * 78 + "\n"
    source = drift_source() + padding * (MAX_SOURCE_BYTES // len(padding) + 1)
    report = check(source)
    assert not report.ok and f"at most {MAX_SOURCE_BYTES} bytes" in report.reason
    assert check(drift_source() + padding * 10).ok


def test_pathological_inputs_do_not_crash_the_checker():
    for source in (
        "(" * 500 + ")" * 500,
        "\x00",
        "def drift(ratio, advantage, epsilon):\n\treturn ratio\n  x\n",
        "x = " + "1+" * 4000 + "1\n" + drift_source(),
    ):
        report = check(source)
        assert not report.ok and report.reason
    assert not check_source(b"bytes", *DRIFT).ok  # type: ignore[arg-type]


def test_the_checker_never_executes_the_source(tmp_path):
    marker = tmp_path / "executed"
    source = f"open({str(marker)!r}, 'w')\n" + drift_source(
        f"    open({str(marker)!r}, 'w')\n" + GOOD_BODY
    )
    assert not check(source).ok
    assert not marker.exists()
