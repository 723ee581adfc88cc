"""From a model's reply to `{thought, name, code}`, tolerantly.

Models are asked for JSON `{"thought", "name", "code"}`, and many comply; the rest wrap it in a
fence, put it inside prose, answer with fenced code and prose, or with a bare function. Tried in
order, first success wins:

1. the whole reply (less any <think> block or ```json fence) as JSON, strictly then leniently
   (raw newlines in strings, trailing commas, Python-style dicts);
2. a JSON object anywhere inside prose;
3. the "code" value of a JSON object that does not parse (unescaped quotes in the code);
4. fenced code blocks: the last one that defines the contracted function;
5. a bare function in the text: the longest run of lines from `def NAME(` (with imports and
   helpers before it) that parses.

The code must parse and define the contracted function at top level; otherwise extraction fails
with one specific reason, which the proposer sends back to the model in a repair round-trip.
"""

from __future__ import annotations

import ast
import json
import re
import textwrap
from dataclasses import dataclass

MAX_THOUGHT_CHARS = 2000

_THINK = re.compile(r"<(think|thinking)>(.*?)</\1>", re.S | re.I)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+\-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_CODE_LANGS = {"", "python", "py", "python3", "jax"}


class ExtractionError(ValueError):
    """Why no program could be taken from a reply (written for the model to read)."""


@dataclass
class Extraction:
    code: str
    thought: str = ""
    name: str = ""
    method: str = ""  # which strategy succeeded: json, json-in-prose, fenced, bare


def extract(reply: str | None, function_name: str) -> Extraction:
    if reply is None or not reply.strip():
        raise ExtractionError("the reply was empty")
    text, thinking = _split_thinking(reply)
    problems: list[str] = []

    for method, obj in json_objects(text):
        code = obj.get("code")
        if not isinstance(code, str) or not code.strip():
            problems.append('the JSON object has no non-empty "code" string')
            continue
        code = _clean_code(code)
        problem = check_code(code, function_name)
        if problem:
            problems.append(f'the "code" field: {problem}')
            continue
        thought = _as_text(obj.get("thought")) or thinking
        return Extraction(code, _trim(thought), clean_name(obj.get("name")), method)

    salvaged = _salvage_code_field(text)
    if salvaged is not None and check_code(salvaged, function_name) is None:
        return Extraction(
            salvaged,
            _trim(_salvage_field(text, "thought") or thinking),
            clean_name(_salvage_field(text, "name")),
            "json-salvaged",
        )

    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    code_blocks = [body for lang, body in blocks if lang in _CODE_LANGS]
    defining = [b for b in code_blocks if _defines_text(b, function_name)]
    for body in reversed(defining):
        code = _clean_code(body)
        problem = check_code(code, function_name)
        if problem is None:
            prose = _FENCE.sub("", text).strip()
            return Extraction(code, _trim(prose or thinking), _name_from_prose(prose), "fenced")
        problems.append(f"the code block: {problem}")

    bare = _bare_function(text, function_name)
    if bare is not None:
        prose = text.replace(bare, "").strip()
        return Extraction(bare, _trim(prose or thinking), _name_from_prose(prose), "bare")

    if _looks_truncated(text):
        raise ExtractionError(
            "the reply was cut off before it ended (unterminated JSON or code); "
            "send a shorter, complete reply"
        )
    if problems:
        raise ExtractionError(problems[-1])
    if re.search(r'["\']code["\']\s*:', text):
        raise ExtractionError(
            'the reply has a "code" field but no complete, valid JSON object around it '
            "(was it cut off, or are quotes and newlines in the code unescaped?)"
        )
    if code_blocks:
        raise ExtractionError(f"no code block defines a top-level function `{function_name}`")
    raise ExtractionError(
        f'no JSON object with a "code" field and no definition of `{function_name}` was found'
    )


def check_code(code: str, function_name: str) -> str | None:
    """None when `code` parses and defines `function_name` at top level, else the problem."""
    try:
        tree = ast.parse(code)
    except SyntaxError as error:
        line = (error.text or "").strip()
        where = f" at line {error.lineno}" + (f": `{line}`" if line else "")
        return f"SyntaxError{where} ({error.msg})"
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function_name:
            return None
    names = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    found = f" (it defines {', '.join(names)})" if names else ""
    return f"it does not define a top-level function `{function_name}`{found}"


# -- JSON ----------------------------------------------------------------------------------
def json_objects(text: str):
    """(method, dict) pairs, best first: the whole text, then objects found inside it."""
    stripped = text.strip()
    fenced = re.fullmatch(r"```[ \t]*(?:json|JSON)?[^\n]*\n(.*?)\n?```", stripped, re.S)
    whole = fenced.group(1) if fenced else stripped
    obj = _loads(whole)
    if isinstance(obj, dict):
        yield "json", obj
    seen = 0
    for match in re.finditer(r"\{", text):
        start = match.start()
        if start < seen:
            continue
        obj, end = _raw_decode(text, start)
        if isinstance(obj, dict) and ({"code", "thought", "diff"} & obj.keys()):
            seen = end
            yield "json-in-prose", obj


def _loads(text: str):
    for attempt in (text, _drop_trailing_commas(text)):
        try:
            return json.loads(attempt, strict=False)
        except (json.JSONDecodeError, ValueError):
            pass
    if text.startswith("{") and text.rstrip().endswith("}"):
        try:  # a Python dict literal with single quotes
            value = ast.literal_eval(text)
            return value if isinstance(value, dict) else None
        # TypeError: a set or dict key that cannot be hashed, e.g. `{{"code": ...}}`, which a
        # small model writes (measured: SmolLM2-135M after its warm start)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
    return None


def _raw_decode(text: str, start: int):
    decoder = json.JSONDecoder(strict=False)
    try:
        return decoder.raw_decode(text, start)
    except (json.JSONDecodeError, ValueError):
        return None, start


def _drop_trailing_commas(text: str) -> str:
    return re.sub(r",(\s*[}\]])", r"\1", text)


def _salvage_code_field(text: str) -> str | None:
    """The "code" value of JSON that does not parse (typically unescaped quotes inside the
    code): from the quote after `"code":` to the quote closing the object or preceding the next
    known key, with JSON escapes undone."""
    start = re.search(r'["\']code["\']\s*:\s*"', text)
    if start is None:
        return None
    rest = text[start.end() :]
    ends = [m.start() for m in re.finditer(r'"\s*,\s*"(?:thought|name|diff)"\s*:', rest)]
    close = [m.start() for m in re.finditer(r'"\s*\}', rest)]
    if ends:
        raw = rest[: ends[0]]
    elif close:
        raw = rest[: close[-1]]
    else:
        return None
    code = raw.replace("\\n", "\n").replace("\\t", "    ").replace('\\"', '"')
    return _clean_code(code.replace("\\\\", "\\"))


def _salvage_field(text: str, key: str) -> str:
    match = re.search(rf'"{key}"\s*:\s*"((?:[^"\\]|\\.)*)"', text)
    return match.group(1) if match else ""


# -- code ----------------------------------------------------------------------------------
def _clean_code(code: str) -> str:
    code = code.strip("\n")
    fenced = re.fullmatch(r"\s*```[^\n]*\n(.*?)\n?```\s*", code, re.S)
    if fenced:
        code = fenced.group(1)
    if "\n" not in code and "\\n" in code:  # double-escaped newlines
        code = code.replace("\\n", "\n").replace('\\"', '"')
    code = code.replace("\t", "    ")
    return _dedent(code).rstrip() + "\n"


def _dedent(code: str) -> str:
    return textwrap.dedent(code)


def _defines_text(code: str, function_name: str) -> bool:
    return re.search(rf"^\s*def\s+{re.escape(function_name)}\s*\(", code, re.M) is not None


_PREAMBLE = re.compile(r"^(import\s|from\s+\S+\s+import\s|@|def\s|[A-Z_][A-Z0-9_]*\s*=)")


def _bare_function(text: str, function_name: str) -> str | None:
    """The longest parseable run of lines around an unfenced `def function_name(`."""
    lines = text.splitlines()
    target = next(
        (
            i
            for i, line in enumerate(lines)
            if re.match(rf"def\s+{re.escape(function_name)}\s*\(", line)
        ),
        None,
    )
    if target is None:
        return None
    start = target
    while start > 0 and (
        not lines[start - 1].strip()
        or lines[start - 1][:1].isspace()
        or _PREAMBLE.match(lines[start - 1])
    ):
        start -= 1
    while start < target and not _PREAMBLE.match(lines[start]):
        start += 1  # drop leading blanks / orphaned indented lines
    end = target + 1
    while end < len(lines) and (
        not lines[end].strip() or lines[end][:1].isspace() or _PREAMBLE.match(lines[end])
    ):
        end += 1
    for stop in range(end, target, -1):
        code = "\n".join(lines[start:stop]).strip("\n") + "\n"
        if check_code(code, function_name) is None:
            return code
    return None


def _looks_truncated(text: str) -> bool:
    stripped = text.strip()
    if stripped.count("```") % 2 == 1:
        return True
    if stripped.startswith("{") or stripped.startswith("```json"):
        return _loads(stripped.removeprefix("```json")) is None
    return False


# -- thought and name ----------------------------------------------------------------------
def _split_thinking(reply: str) -> tuple[str, str]:
    thinking = " ".join(m.group(2).strip() for m in _THINK.finditer(reply))
    return _THINK.sub("", reply).strip(), thinking


def _as_text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return "\n".join(str(v) for v in value)
    return str(value).strip()


def clean_name(value) -> str:
    """A candidate name: word characters, dashes and dots, at most 80."""
    name = re.sub(r"[^A-Za-z0-9_\-. ]", "", _as_text(value)).strip()
    return re.sub(r"\s+", "_", name)[:80]


def _name_from_prose(prose: str) -> str:
    match = re.search(r"(?im)^\W*name\W*[:=]\s*[`\"']?([A-Za-z0-9_\-. ]{2,80})", prose)
    return clean_name(match.group(1)) if match else ""


def _trim(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_THOUGHT_CHARS else text[: MAX_THOUGHT_CHARS - 3] + "..."
