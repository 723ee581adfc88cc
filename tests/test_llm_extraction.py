"""Extraction of {thought, name, code} from a corpus of realistic replies.

Each corpus entry is (label, reply, expected): expected is a substring the extracted code must
contain, or None when extraction must fail (the proposer then asks for a repair). The fraction of
extractable replies actually extracted is asserted and reported (printed; see `-s` or `-rA`).
"""

from __future__ import annotations

import json

import pytest

from metarl.discovery.proposers.llm.extraction import ExtractionError, check_code, extract

FN = "drift"
BODY = (
    "def drift(ratio, advantage, epsilon):\n"
    "    excess = jax.nn.relu(jnp.abs(ratio - 1.0) - epsilon)\n"
    "    return excess ** 2 * jnp.abs(advantage)\n"
)
MARK = "excess ** 2"

CORPUS: list[tuple[str, str, str | None]] = [
    ("clean json", json.dumps({"thought": "t", "name": "quad", "code": BODY}), MARK),
    (
        "json in ```json fence",
        "```json\n" + json.dumps({"thought": "t", "name": "q", "code": BODY}, indent=2) + "\n```",
        MARK,
    ),
    (
        "json in prose",
        "Sure! Here is my proposal:\n\n"
        + json.dumps({"thought": "t", "name": "q", "code": BODY})
        + "\n\nLet me know how it does.",
        MARK,
    ),
    (
        "json with raw newlines in string",
        '{"thought": "smooth", "name": "q", "code": "' + BODY.replace('"', '\\"') + '"}',
        MARK,
    ),
    (
        "json with trailing comma",
        '{"thought": "x", "name": "q", "code": ' + json.dumps(BODY) + ",\n}",
        MARK,
    ),
    (
        "python dict with single quotes",
        "{'thought': 'x', 'name': 'q', 'code': " + repr(BODY) + "}",
        MARK,
    ),
    (
        "json whose code is fenced",
        json.dumps({"thought": "t", "name": "q", "code": "```python\n" + BODY + "```"}),
        MARK,
    ),
    (
        "json with double-escaped newlines",
        '{"thought": "t", "name": "q", "code": "' + BODY.replace("\n", "\\\\n") + '"}',
        MARK,
    ),
    ("json thought as list", json.dumps({"thought": ["a", "b"], "name": "q", "code": BODY}), MARK),
    (
        "fenced python with prose",
        "I'll try a quadratic penalty.\n\n```python\n"
        + BODY
        + "```\n\nThis should be smoother than clipping.",
        MARK,
    ),
    ("fenced without language", "Here you go:\n```\n" + BODY + "```", MARK),
    (
        "two code blocks: old then new",
        "The current code is:\n```python\ndef drift(ratio, advantage, epsilon):\n    return "
        "jnp.zeros_like(ratio)\n```\nMy improved version:\n```python\n" + BODY + "```",
        MARK,
    ),
    (
        "two code blocks: code then usage",
        "```python\n" + BODY + "```\nUsage:\n```python\nout = drift(r, a, 0.2)\n```",
        MARK,
    ),
    (
        "fenced with imports and helper",
        "Name: smooth_quad\n```python\nimport jax.numpy as jnp\n\ndef _pen(x):\n    return x ** "
        "2\n\ndef drift(ratio, advantage, epsilon):\n    excess = jax.nn.relu(jnp.abs(ratio - "
        "1.0) - epsilon)\n    return _pen(excess) * jnp.abs(advantage)\n```",
        "_pen(excess)",
    ),
    ("bare function", BODY, MARK),
    (
        "bare function with prose around",
        "Here's a new drift function:\n\n"
        + BODY
        + "\nIt penalises large ratio deviations quadratically.",
        MARK,
    ),
    ("bare function with import line", "import jax.numpy as jnp\n" + BODY + "\nThat's it.", MARK),
    (
        "think block then json",
        "<think>Maybe quadratic. Let me check the constraints.</think>\n"
        + json.dumps({"thought": "t", "name": "q", "code": BODY}),
        MARK,
    ),
    (
        "think block then fenced",
        "<think>hmm {not json}</think>\nAnswer:\n```python\n" + BODY + "```",
        MARK,
    ),
    (
        "markdown with headers and fenced",
        "## Idea\nQuadratic trust region.\n\n## Code\n```py\n" + BODY + "```\n## Why\nSmooth.",
        MARK,
    ),
    (
        "json with tabs indentation",
        json.dumps({"thought": "t", "name": "q", "code": BODY.replace("    ", "\t")}),
        MARK,
    ),
    (
        "fenced indented inside list",
        "1. Step one\n2. Code:\n   ```python\n   def drift(ratio, advantage, epsilon):\n       "
        "excess = jax.nn.relu(jnp.abs(ratio - 1.0) - epsilon)\n       return excess ** 2 * "
        "jnp.abs(advantage)\n   ```",
        MARK,
    ),
    (
        "json prose with braces before",
        "The drift {as in LPO} must be >= 0. Reply:\n"
        + json.dumps({"thought": "t", "name": "q", "code": BODY}),
        MARK,
    ),
    (
        "fenced json containing code then prose",
        "Sure.\n```json\n"
        + json.dumps({"thought": "t", "name": "q", "code": BODY})
        + "\n```\nHope it helps!",
        MARK,
    ),
    (
        "json missing closing brace at end but fenced code inside",
        '{"thought": "t", "name": "q", "code": "x"\n```python\n' + BODY + "```",
        MARK,
    ),
    (
        "pseudo-json with python triple quotes",
        '{"thought": "t", "name": "q", "code": """' + BODY + '"""}',
        MARK,
    ),
    ("tilde fence", "Here:\n~~~python\n" + BODY + "~~~\n", MARK),
    (
        "json with unescaped quotes in code",
        '{"thought": "t", "name": "q", "code": "'
        + BODY.replace("    excess", '    # the "trust region" excess\n    excess')
        + '"}',
        MARK,
    ),
    ("fenced Python capitalised", "```Python\n" + BODY + "```", MARK),
    (
        "json then trailing chatter with braces",
        json.dumps({"thought": "t", "name": "q", "code": BODY}) + "\nNote: {ratio} is > 0.",
        MARK,
    ),
    # replies that must fail (the proposer asks for a repair)
    ("empty reply", "", None),
    ("whitespace reply", "   \n  ", None),
    (
        "truncated json",
        json.dumps({"thought": "a long idea", "name": "q", "code": BODY})[:-40],
        None,
    ),
    ("refusal prose", "I'm sorry, but I can't help with that request.", None),
    (
        "wrong function name",
        json.dumps(
            {"thought": "t", "name": "q", "code": BODY.replace("def drift", "def my_drift")}
        ),
        None,
    ),
    (
        "syntax error in code",
        json.dumps(
            {
                "thought": "t",
                "name": "q",
                "code": "def drift(ratio, advantage, epsilon)\n    return ratio\n",
            }
        ),
        None,
    ),
    (
        "unterminated fence",
        "```python\ndef drift(ratio, advantage, epsilon):\n    excess = jax.nn.relu(jnp.abs(ratio "
        "-",
        None,
    ),
    ("json without code", json.dumps({"thought": "I would use a quadratic", "name": "q"}), None),
]


@pytest.mark.parametrize("label,reply,expected", CORPUS, ids=[c[0] for c in CORPUS])
def test_corpus_entry(label, reply, expected):
    if expected is None:
        with pytest.raises(ExtractionError) as info:
            extract(reply, FN)
        assert str(info.value)  # a reason the model can act on
    else:
        result = extract(reply, FN)
        assert expected in result.code
        assert check_code(result.code, FN) is None


def test_success_fraction_reported(capsys):
    extractable = [(label, reply, exp) for label, reply, exp in CORPUS if exp is not None]
    ok = 0
    for _label, reply, expected in extractable:
        try:
            ok += expected in extract(reply, FN).code
        except ExtractionError:
            pass
    fraction = ok / len(extractable)
    with capsys.disabled():
        print(
            f"\nLLM reply extraction: {ok}/{len(extractable)} extractable replies "
            f"({fraction:.0%}); {len(CORPUS) - len(extractable)} unusable replies rejected"
        )
    assert fraction >= 0.95


def test_json_fields_and_method():
    result = extract(json.dumps({"thought": "because", "name": "quad trust!", "code": BODY}), FN)
    assert (result.thought, result.name, result.method) == ("because", "quad_trust", "json")
    fenced = extract("Name: my_idea\nThinking aloud.\n```python\n" + BODY + "```", FN)
    assert fenced.method == "fenced" and fenced.name == "my_idea" and "Thinking" in fenced.thought


def test_reasons_are_specific():
    with pytest.raises(ExtractionError, match="cut off"):
        extract('{"thought": "x", "code": "def drift(ratio', FN)
    with pytest.raises(ExtractionError, match="my_drift"):
        extract(json.dumps({"code": BODY.replace("def drift", "def my_drift")}), FN)
    with pytest.raises(ExtractionError, match="SyntaxError at line 1"):
        extract(json.dumps({"code": "def drift(ratio, advantage, epsilon)\n  return 1\n"}), FN)
    with pytest.raises(ExtractionError, match="empty"):
        extract("", FN)


def test_a_reply_that_is_an_unhashable_python_literal_is_a_clear_failure_not_a_crash():
    # a set holding a dict: `ast.literal_eval` raises TypeError (measured from SmolLM2-135M)
    for reply in ('{{"thought": "x", "code": "y"}}', "{[1, 2]}", "{{1}: 2}"):
        with pytest.raises(ExtractionError):
            extract(reply, FN)
    wrapped = "{" + json.dumps({"thought": "t", "code": BODY}) + "}"
    assert extract(wrapped, FN).code.strip() == BODY.strip()
