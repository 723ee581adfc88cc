"""An LPG candidate is untrusted data: every hostile file is refused with one "not an LPG
network" line before anything of its claimed size is allocated, or trained inside a sandboxed
worker whose `--timeout` and `--memory-mb` hold, blamed on itself, while the other candidates
of its batch score as they would alone.

The parse-level cases run in this process (no worker: a refused text starts none); the
end-to-end batch through `metarl evaluate` is in the slow tier.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import resource
import time
import tracemalloc
import zipfile

import jax
import numpy as np
import pytest
from conftest import metarl_cli

from metarl.evaluation.lpg_evaluation import LPGEvaluator
from metarl.evaluation.seeds import SeedSource
from metarl.rl.lpg.network import (
    MAX_PARAMETERS,
    MAX_SOURCE_BYTES,
    LPGFormatError,
    LPGShape,
    init_lpg,
    lpg_source,
    read_lpg_source,
)
from metarl.rl.suites import get_suite

SHAPE = LPGShape()
SHAPE_TEXT = repr(dict(SHAPE._asdict()))
LEAVES = [
    np.asarray(leaf, np.float32) for leaf in jax.tree.leaves(init_lpg(jax.random.PRNGKey(0), SHAPE))
]


def module(weights: str, shape_text: str = SHAPE_TEXT) -> str:
    return f'"""hostile"""\n\nLPG_SHAPE = {shape_text}\nLPG_WEIGHTS = "{weights}"\n'


def encoded(members: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> str:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return base64.b64encode(buffer.getvalue()).decode()


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


@functools.cache
def zip_bomb() -> str:
    """Every member a run of zeros that inflates to 16 MB (256 MB in all): 16 kB each."""
    zeros = b"\0" * (16 << 20)
    return module(encoded({f"arr_{i}.npy": zeros for i in range(len(LEAVES))}))


def lying_bomb() -> str:
    """One member whose directory entry declares its true small size, but whose .npy header
    claims a shape of 10^10 floats (what numpy would allocate before reading a byte)."""
    buffer = io.BytesIO()
    header = {"descr": "<f4", "fortran_order": False, "shape": (10**10,)}
    np.lib.format.write_array_header_1_0(buffer, header)
    members = {f"arr_{i}.npy": npy(leaf) for i, leaf in enumerate(LEAVES)}
    members["arr_0.npy"] = buffer.getvalue()
    return module(encoded(members))


HOSTILE = {
    "zip bomb": (zip_bomb, "declares"),
    "header claiming 1e10 floats": (lying_bomb, "shape"),
    "width bomb": (
        lambda: module("", "{'gru_width': 4096}"),
        "gru_width must be an int in [1, 512]",
    ),
    "too many weights": (
        lambda: module("", "{'gru_width': 512, 'embedding_width': 512, 'target_width': 512}"),
        f"at most {MAX_PARAMETERS}",
    ),
    "non-string key": (lambda: module("", "{1: 2, 'gru_width': 8}"), "keys must be field names"),
    "boolean width": (lambda: module("", "{'gru_width': True}"), "must be an int"),
    "members that are not .npy": (
        lambda: module(encoded({f"arr_{i}.npy": b"hello" for i in range(len(LEAVES))})),
        "is not an .npy array",
    ),
    "arrays of strings": (
        lambda: module(
            encoded({f"arr_{i}.npy": npy(leaf.astype("U3")) for i, leaf in enumerate(LEAVES)})
        ),
        "not floating-point numbers",
    ),
    "an extra member": (
        lambda: module(
            encoded({**{f"arr_{i}.npy": npy(leaf) for i, leaf in enumerate(LEAVES)}, "x.py": b"1"})
        ),
        "members",
    ),
    "non-finite weights": (
        lambda: module(
            encoded(
                {f"arr_{i}.npy": npy(np.full_like(leaf, np.inf)) for i, leaf in enumerate(LEAVES)}
            )
        ),
        "non-finite",
    ),
    "not base64": (lambda: module("!!!"), "not base64"),
    "weights that are not a str": (
        lambda: f"LPG_SHAPE = {SHAPE_TEXT}\nLPG_WEIGHTS = [1, 2]\n",
        "must be a str",
    ),
    "deeply nested literal": (
        lambda: "LPG_SHAPE = " + "[" * 5000 + "]" * 5000 + "\nLPG_WEIGHTS = ''\n",
        "",
    ),
    "a text past the size cap": (lambda: module("A" * (MAX_SOURCE_BYTES + 4)), "characters"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_lpg_data_is_refused_in_one_line_with_bounded_memory(name):
    make, expected = HOSTILE[name]
    source = make()
    tracemalloc.start()
    try:
        with pytest.raises(LPGFormatError) as error:
            read_lpg_source(source)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(error.value)
    assert expected in message
    assert "\n" not in message and len(message) < 400
    # the bombs claim gigabytes; reading them costs at most a few copies of the text itself
    assert peak < 3 * len(source) + (64 << 20), peak


def test_an_honest_network_is_read_back_exactly():
    params = init_lpg(jax.random.PRNGKey(3), LPGShape(gru_width=256))  # GROOVE's width
    shape, read = read_lpg_source(lpg_source(params, LPGShape(gru_width=256), "GROOVE-sized"))
    assert shape == LPGShape(gru_width=256)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(read)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_evaluator_refuses_hostile_data_without_starting_a_worker():
    evaluator = LPGEvaluator(get_suite("smoke"), SeedSource(1, pinned=[0]))
    outcomes = evaluator.evaluate_batch([make() for make, _ in HOSTILE.values()])
    assert evaluator.jobs == 0
    for outcome in outcomes:
        assert not outcome.passed and outcome.stage == "static"
        assert outcome.fault == "candidate"
        assert outcome.reason.startswith("not an LPG network: ")


@pytest.mark.slow
def test_a_batch_of_data_candidates_survives_its_bad_members_within_the_limits(tmp_path):
    """`metarl evaluate` on [zip bomb, honest, width within the caps but too slow for
    --timeout, malformed]: one line each for the bad ones, blamed on them, within the
    limits; the honest one scores exactly as it does alone."""
    honest = tmp_path / "honest.py"
    honest.write_text(lpg_source(init_lpg(jax.random.PRNGKey(0), SHAPE), SHAPE, "honest"))
    bomb = tmp_path / "bomb.py"
    bomb.write_text(zip_bomb())
    wide = LPGShape(gru_width=512, embedding_width=512)
    slow = tmp_path / "slow.py"
    slow.write_text(lpg_source(init_lpg(jax.random.PRNGKey(0), wide), wide, "wide"))
    malformed = tmp_path / "malformed.py"
    malformed.write_text(HOSTILE["arrays of strings"][0]())
    common = ["--task", "lpg", "--suite", "smoke", "--seed-values", "4,5", "--json"]
    limits = ["--memory-mb", "3000"]

    alone = metarl_cli("evaluate", str(honest), *common, "--timesteps", "3200", *limits)
    assert alone.returncode == 0, alone.stderr[-2000:]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    batch = metarl_cli(
        "evaluate", str(bomb), str(honest), str(malformed), *common, "--timesteps", "3200",
        *limits,
    )  # fmt: skip
    assert batch.returncode == 1, batch.stderr[-2000:]
    bad, good, broken = json.loads(batch.stdout)
    assert bad["stage"] == "static" and "not an LPG network" in bad["reason"]
    assert broken["stage"] == "static" and "floating-point" in broken["reason"]
    assert good["passed"] and good["fault"] is None
    assert good["env_scores"][0]["returns"] == json.loads(alone.stdout)["env_scores"][0]["returns"]
    # the parent read a 256 MB bomb: its peak stays far below the memory limit
    peak_mb = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    assert peak_mb < 3000, peak_mb
    assert time.perf_counter() - start < 600

    # a network within the caps whose training outlasts --timeout: killed at it, its fault
    start = time.perf_counter()
    timed = metarl_cli(
        "evaluate", str(slow), *common, "--timesteps", "3200000", "--timeout", "20", *limits
    )
    elapsed = time.perf_counter() - start
    assert timed.returncode == 1
    outcome = json.loads(timed.stdout)
    assert outcome["stage"] == "full" and outcome["fault"] == "candidate"
    assert "timed out after 20 s" in outcome["reason"]
    assert elapsed < 20 + 120  # the limit, plus the worker's start and the parent's imports
