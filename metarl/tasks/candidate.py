"""Turning candidate source text into a function, and identifying it.

`load_function` is only ever called inside the sandboxed worker (and on the trusted seed files):
the parent process never executes candidate code. The namespace offers exactly the vocabulary
of the contract (jax, jnp, lax, math) and an import hook that admits only those modules; the
static stage has already rejected everything else before this runs.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import importlib
from typing import Callable

from metarl.tasks.vocabulary import ALLOWED_MODULES, BUILTINS, PROVIDED_MODULES

SAFE_BUILTINS = {name: getattr(builtins, name) for name in BUILTINS}


class CandidateLoadError(Exception):
    pass


def _guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level != 0 or name not in ALLOWED_MODULES:
        raise ImportError(f"import of {name!r} is not allowed; allowed: {sorted(ALLOWED_MODULES)}")
    return __import__(name, globals, locals, fromlist, level)


def candidate_namespace() -> dict:
    """A fresh module namespace holding exactly the vocabulary (tasks/vocabulary.py)."""
    modules = {name: importlib.import_module(path) for name, path in PROVIDED_MODULES.items()}
    return {
        "__builtins__": {**SAFE_BUILTINS, "__import__": _guarded_import},
        "__name__": "candidate",
        **modules,
    }


def load_function(source: str, function_name: str) -> Callable:
    """Execute `source` in the restricted namespace and return its `function_name`."""
    namespace = candidate_namespace()
    try:
        code = compile(source, "<candidate>", "exec")
        exec(code, namespace)  # noqa: S102 - restricted namespace, inside the sandbox only
    except Exception as error:  # the candidate's own failure, reported to the proposer
        raise CandidateLoadError(
            f"{type(error).__name__} while defining the candidate: {error}"
        ) from error
    function = namespace.get(function_name)
    if not callable(function):
        raise CandidateLoadError(f"the candidate does not define a function `{function_name}`")
    return function


def normalise_source(source: str) -> str:
    """Source with comments, docstrings and formatting removed: equal programs compare equal."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source.strip()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(getattr(body[0], "value", None), ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def source_hash(source: str) -> str:
    return hashlib.sha256(normalise_source(source).encode()).hexdigest()[:16]
