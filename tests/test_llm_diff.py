"""SEARCH/REPLACE application: exact, whitespace-tolerant, indentation-tolerant, and failing
with a reason that names the block."""

import pytest

from metarl.discovery.proposers.llm.diff import DiffError, apply_diff, parse_blocks, strip_blocks

SOURCE = (
    "def drift(ratio, advantage, epsilon):\n"
    "    clipped = jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)\n"
    "    return jax.nn.relu((ratio - clipped) * advantage)\n"
)


def block(search, replace):
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE"


def test_exact_and_multiple_blocks():
    text = (
        block(
            "    return jax.nn.relu((ratio - clipped) * advantage)",
            "    return jax.nn.softplus((ratio - clipped) * advantage)",
        )
        + "\n"
        + block("1.0 + epsilon)", "1.0 + 2 * epsilon)")
    )
    out = apply_diff(SOURCE, text)
    assert "softplus" in out and "1.0 + 2 * epsilon" in out and out.endswith("\n")


def test_trailing_whitespace_and_indentation_are_tolerated():
    out = apply_diff(
        SOURCE,
        block(
            "    clipped = jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon)   ", "    clipped = ratio"
        ),
    )
    assert "    clipped = ratio\n" in out
    out = apply_diff(
        SOURCE,
        block(
            "return jax.nn.relu((ratio - clipped) * advantage)",
            "scale = 2.0\nreturn scale * jax.nn.relu((ratio - clipped) * advantage)",
        ),
    )
    assert "    scale = 2.0\n    return scale *" in out


def test_unmatched_block_names_itself():
    with pytest.raises(DiffError, match="SEARCH block 2 of 2 does not match"):
        apply_diff(
            SOURCE, block("1.0 + epsilon)", "1.1)") + "\n" + block("    return 0", "    return 1")
        )
    with pytest.raises(DiffError, match="no complete SEARCH/REPLACE block"):
        apply_diff(SOURCE, "<<<<<<< SEARCH\nreturn\n=======\n")


def test_parse_and_strip():
    text = "prose\n" + block("a", "b") + "\nmore prose"
    assert parse_blocks(text) == [("a", "b")]
    assert strip_blocks(text) == "prose\n\nmore prose"
