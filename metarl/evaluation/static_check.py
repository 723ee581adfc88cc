"""Stage 1 of the cascade: a static check of candidate source, in the parent, with `ast` only.

Nothing here executes, compiles or imports the candidate: the source is parsed into a syntax
tree and walked. This stage is the real gate of the sandbox (the worker's restricted namespace
and its process limits are defence in depth), so it is deliberately strict. A candidate module
may contain only:

- imports of `jax`, `jax.numpy`, `jax.nn`, `jax.lax` and `math` (plus `from` imports of their
  public names);
- function definitions: exactly one of the contracted function, with exactly the contracted
  positional parameters, and any number of helpers;
- assignments of constant expressions to names (`ALPHA = 2.0`, `SHAPE = (1, -1)`), and a
  docstring.

Everywhere in the module:

- no names or attributes that start with `_` (dunder access and private internals);
- no `exec`, `eval`, `compile`, `open`, `globals`, `locals`, `vars`, `getattr`, `setattr`,
  `delattr`, `__import__`, `input`, `breakpoint`, `type`, `object`, ... (see BANNED_NAMES);
- no attributes that reach I/O or the interpreter: `load`/`save`/`fromfile`/`tofile`, callbacks,
  `config`, `profiler`, frame and code objects, `format` (which can reach attributes by
  string) (see BANNED_ATTRIBUTES); of `jax.<x>` only the names in JAX_ALLOWED may be used, and
  of `jax.debug` only `print`;
- no `global`/`nonlocal`, classes, generators, `async`, `with`, decorators, star imports;
- no assignment to attributes (`jnp.tanh = ...`): modules cannot be patched;
- no name that is never defined (a typo, or `np` without an import);
- at most MAX_SOURCE_BYTES of source.

Each check returns the first problem found as one sentence naming the line, written for the
LLM that has to fix it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Sequence

from metarl.tasks.vocabulary import ALLOWED_MODULES, BUILTINS, PROVIDED_MODULES

MAX_SOURCE_BYTES = 20_000
MAX_AST_NODES = 5_000

# The vocabulary (metarl/tasks/vocabulary.py), plus print: its output is captured and truncated.
ALLOWED_BUILTINS = frozenset(BUILTINS) | {"print"}

BANNED_NAMES = frozenset(
    {
        "exec",
        "eval",
        "compile",
        "open",
        "globals",
        "locals",
        "vars",
        "getattr",
        "setattr",
        "delattr",
        "hasattr",
        "__import__",
        "input",
        "breakpoint",
        "help",
        "dir",
        "type",
        "object",
        "super",
        "memoryview",
        "classmethod",
        "staticmethod",
        "property",
        "exit",
        "quit",
        "id",
        "iter",
        "next",
        "format",
        "callable",
        "issubclass",
        "bytearray",
        "bytes",
        "frozenset",
        "copyright",
        "credits",
        "license",
        "__builtins__",
        "__loader__",
        "__spec__",
    }
)

# Attribute names that are refused on any object: file I/O, host callbacks, global configuration,
# interpreter internals (frames, code objects), string formatting that can reach attributes.
BANNED_ATTRIBUTES = frozenset(
    {
        # numpy-style file I/O exposed by jax.numpy and arrays
        "load",
        "loads",
        "save",
        "savez",
        "savez_compressed",
        "savetxt",
        "loadtxt",
        "genfromtxt",
        "fromfile",
        "tofile",
        "frombuffer",
        "fromregex",
        "memmap",
        "dump",
        "dumps",
        "from_dlpack",
        "dlpack",
        "set_printoptions",
        "printoptions",
        # host callbacks run arbitrary Python from inside jit
        "callback",
        "pure_callback",
        "io_callback",
        "debug_callback",
        "host_callback",
        "inspect_array_sharding",
        "visualize_array_sharding",
        "breakpoint",
        # global state of jax / XLA, the profiler, distributed setup, internals
        "config",
        "profiler",
        "distributed",
        "experimental",
        "monitoring",
        "ffi",
        "export",
        "extend",
        "interpreters",
        "lib",
        "core",
        "api_util",
        "clear_caches",
        "live_arrays",
        "device_put",
        "device_get",
        "make_array_from_callback",
        "effects_barrier",
        "enable_x64",
        "disable_jit",
        "print_environment_info",
        "compilation_cache",
        # interpreter internals reachable without dunders
        "gi_frame",
        "gi_code",
        "gi_yieldfrom",
        "cr_frame",
        "cr_code",
        "cr_await",
        "ag_frame",
        "ag_code",
        "f_back",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_code",
        "tb_frame",
        "tb_next",
        "co_code",
        "co_consts",
        "co_names",
        "func_globals",
        "func_code",
        "mro",
        "format",
        "format_map",
        "system",
        "popen",
        "environ",
        "getenv",
        "modules",
    }
)

# The public names of `jax` a candidate may use (jax.numpy etc. are reached through these).
JAX_ALLOWED = frozenset(
    {
        "numpy",
        "lax",
        "nn",
        "random",
        "scipy",
        "tree",
        "tree_util",
        "vmap",
        "grad",
        "value_and_grad",
        "jit",
        "jvp",
        "vjp",
        "jacfwd",
        "jacrev",
        "jacobian",
        "hessian",
        "checkpoint",
        "remat",
        "custom_jvp",
        "custom_vjp",
        "eval_shape",
        "Array",
        "debug",
        "dtypes",
        "ShapeDtypeStruct",
        "named_scope",
        "stop_gradient",
    }
)
JAX_DEBUG_ALLOWED = frozenset({"print"})

_FORBIDDEN_NODES = {
    ast.Global: "`global` statements are not allowed: a candidate keeps no global state",
    ast.Nonlocal: "`nonlocal` statements are not allowed: a candidate keeps no shared state",
    ast.ClassDef: "class definitions are not allowed: define functions only",
    ast.AsyncFunctionDef: "`async def` is not allowed",
    ast.Await: "`await` is not allowed",
    ast.AsyncFor: "`async for` is not allowed",
    ast.AsyncWith: "`async with` is not allowed",
    ast.With: "`with` statements are not allowed: a candidate does no I/O",
    ast.Yield: "generators (`yield`) are not allowed: return arrays",
    ast.YieldFrom: "generators (`yield from`) are not allowed: return arrays",
}

_CONSTANT_NODES = (
    ast.Constant,
    ast.UnaryOp,
    ast.BinOp,
    ast.BoolOp,
    ast.Compare,
    ast.Tuple,
    ast.List,
    ast.Name,
    ast.Attribute,
    ast.Load,
    ast.operator,
    ast.unaryop,
    ast.boolop,
    ast.cmpop,
)


@dataclass
class StaticReport:
    ok: bool
    reason: str | None = None
    line: int | None = None
    warnings: list[str] = field(default_factory=list)


class _Reject(Exception):
    def __init__(self, message: str, node: ast.AST | None = None):
        super().__init__(message)
        self.message = message
        self.line = getattr(node, "lineno", None)


def parameters_of(signature: str) -> tuple[str, list[str]]:
    """`"drift(ratio, advantage, epsilon) -> array"` -> ("drift", ["ratio", "advantage", ...])."""
    match = re.match(r"\s*(\w+)\s*\(([^)]*)\)", signature)
    if not match:
        raise ValueError(f"cannot read a function signature from {signature!r}")
    params = [p.strip().split("=")[0].split(":")[0].strip() for p in match.group(2).split(",")]
    return match.group(1), [p for p in params if p]


def check_task_source(source: str, task) -> StaticReport:
    """Static check of `source` against `task`'s contract (its function name and parameters)."""
    name, params = parameters_of(task.signature)
    return check_source(source, task.function_name or name, params)


def check_source(
    source: str,
    function_name: str,
    parameters: Sequence[str],
    max_bytes: int = MAX_SOURCE_BYTES,
) -> StaticReport:
    """Check candidate `source` defines `function_name(*parameters)` using only allowed code."""
    try:
        _check(source, function_name, list(parameters), max_bytes)
    except _Reject as reject:
        where = f"line {reject.line}: " if reject.line else ""
        return StaticReport(ok=False, reason=where + reject.message, line=reject.line)
    return StaticReport(ok=True)


def _line_text(lines: list[str], node: ast.AST) -> str:
    lineno = getattr(node, "lineno", None)
    if not lineno or lineno > len(lines):
        return ""
    text = lines[lineno - 1].strip()
    return text if len(text) <= 100 else text[:97] + "..."


def _check(source: str, function_name: str, parameters: list[str], max_bytes: int) -> None:
    if not isinstance(source, str):
        raise _Reject("the candidate must be Python source text")
    size = len(source.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise _Reject(f"the source is {size} bytes; at most {max_bytes} bytes are allowed")
    if not source.strip():
        raise _Reject(f"the source is empty; expected a definition of `{function_name}`")
    try:
        tree = ast.parse(source, filename="<candidate>")
    except SyntaxError as error:
        text = (error.text or "").strip()
        shown = f" (`{text[:100]}`)" if text else ""
        raise _Reject(f"SyntaxError: {error.msg}{shown}", error) from None
    except (ValueError, RecursionError, MemoryError) as error:
        raise _Reject(f"the source cannot be parsed: {type(error).__name__}: {error}") from None

    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_AST_NODES:
        raise _Reject(
            f"the program has {len(nodes)} syntax nodes; at most {MAX_AST_NODES} are allowed"
        )
    lines = source.splitlines()

    modules = dict(PROVIDED_MODULES)  # local name -> module path
    defined: set[str] = set(modules)
    definitions = []

    # Top level: imports, function definitions, constant assignments, a docstring.
    for statement in tree.body:
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                _check_module(alias.name, statement)
                if alias.asname:
                    modules[alias.asname] = alias.name
                    defined.add(alias.asname)
                else:
                    root = alias.name.split(".")[0]
                    modules[root] = root
                    defined.add(root)
        elif isinstance(statement, ast.ImportFrom):
            if statement.level:
                raise _Reject("relative imports are not allowed", statement)
            module = statement.module or ""
            _check_module(module, statement)
            for alias in statement.names:
                if alias.name == "*":
                    raise _Reject(
                        f"`from {module} import *` is not allowed: import names explicitly",
                        statement,
                    )
                _check_attribute_path(f"{module}.{alias.name}", alias.name, statement)
                full = f"{module}.{alias.name}"
                local = alias.asname or alias.name
                if full in ALLOWED_MODULES:
                    modules[local] = full
                defined.add(local)
        elif isinstance(statement, ast.FunctionDef):
            if statement.name == function_name:
                definitions.append(statement)
            defined.add(statement.name)
        elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target in targets:
                if isinstance(target, (ast.Attribute, ast.Subscript)):
                    raise _Reject(
                        f"assigning to attributes or items (`{_line_text(lines, statement)}`) is "
                        "not allowed: modules cannot be patched",
                        statement,
                    )
                for name_node in _assigned_names(target, statement, top_level=True):
                    defined.add(name_node)
            if statement.value is not None:
                for sub in ast.walk(statement.value):
                    if not isinstance(sub, _CONSTANT_NODES):
                        raise _Reject(
                            "top-level assignments may only bind constants "
                            f"(`{_line_text(lines, statement)}`); compute values inside functions",
                            statement,
                        )
        elif (
            isinstance(statement, ast.Expr)
            and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str)
        ):
            continue  # a docstring or a bare string
        elif isinstance(statement, ast.Pass):
            continue
        elif type(statement) in _FORBIDDEN_NODES:
            raise _Reject(_FORBIDDEN_NODES[type(statement)], statement)
        else:
            raise _Reject(
                f"top-level statement `{_line_text(lines, statement)}` is not allowed: a candidate "
                "module may contain only imports, function definitions and constant assignments",
                statement,
            )

    if not definitions:
        others = [s.name for s in tree.body if isinstance(s, ast.FunctionDef)]
        found = f"; it defines {', '.join(f'`{n}`' for n in others)}" if others else ""
        raise _Reject(
            f"the candidate must define a top-level function `{function_name}"
            f"({', '.join(parameters)})`{found}"
        )
    if len(definitions) > 1:
        raise _Reject(
            f"`{function_name}` is defined {len(definitions)} times (lines "
            f"{', '.join(str(d.lineno) for d in definitions)}); define it exactly once",
            definitions[1],
        )
    _check_signature(definitions[0], function_name, parameters)

    # Names bound anywhere (parameters, assignments, loop targets, helpers...).
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.Lambda)):
            args = node.args
            for arg in args.posonlyargs + args.args + args.kwonlyargs:
                defined.add(arg.arg)
            for arg in (args.vararg, args.kwarg):
                if arg is not None:
                    defined.add(arg.arg)
            if isinstance(node, ast.FunctionDef):
                defined.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            defined.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            defined.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and node not in tree.body:
            for alias in node.names if isinstance(node, ast.Import) else []:
                _check_module(alias.name, node)
            if isinstance(node, ast.ImportFrom):
                _check_module(node.module or "", node)
            raise _Reject("imports are allowed only at the top of the module", node)

    for node in nodes:
        _check_node(node, lines, modules, defined)


def _check_module(name: str, node: ast.AST) -> None:
    if name not in ALLOWED_MODULES:
        root = name.split(".")[0]
        hint = "" if root == "jax" else " (no numpy, os, sys or other libraries)"
        raise _Reject(
            f"import of `{name}` is not allowed{hint}; a candidate may import only "
            + ", ".join(ALLOWED_MODULES),
            node,
        )


def _check_attribute_path(path: str, attribute: str, node: ast.AST) -> None:
    if attribute.startswith("_"):
        raise _Reject(
            f"access to `{attribute}` is not allowed: names starting with `_` (dunders and "
            "private internals) are off limits",
            node,
        )
    if attribute in BANNED_ATTRIBUTES:
        raise _Reject(
            f"`{path}` is not allowed: it reaches I/O, host callbacks, global configuration or "
            "interpreter internals, which candidates may not use",
            node,
        )
    parts = path.split(".")
    if parts[0] == "jax" and len(parts) >= 2:
        if parts[1] not in JAX_ALLOWED:
            raise _Reject(
                f"`{path}` is not allowed; of `jax` a candidate may use only: "
                + ", ".join(sorted(JAX_ALLOWED)),
                node,
            )
        if parts[1] == "debug" and len(parts) >= 3 and parts[2] not in JAX_DEBUG_ALLOWED:
            raise _Reject(f"`{path}` is not allowed; of `jax.debug` only `print` is", node)


def _assigned_names(target: ast.AST, statement: ast.AST, top_level: bool = False) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        names = []
        for element in target.elts:
            names.extend(_assigned_names(element, statement, top_level))
        return names
    if isinstance(target, ast.Starred):
        return _assigned_names(target.value, statement, top_level)
    if top_level:
        raise _Reject("top-level assignments may only bind names", statement)
    return []


def _check_signature(
    definition: ast.FunctionDef, function_name: str, parameters: list[str]
) -> None:
    args = definition.args
    got = [a.arg for a in args.posonlyargs + args.args]
    expected = f"`def {function_name}({', '.join(parameters)})`"
    if args.vararg or args.kwarg or args.kwonlyargs or got != parameters:
        shown = list(got)
        if args.vararg:
            shown.append(f"*{args.vararg.arg}")
        shown += [a.arg for a in args.kwonlyargs]
        if args.kwarg:
            shown.append(f"**{args.kwarg.arg}")
        raise _Reject(
            f"expected {expected}; got `def {function_name}({', '.join(shown)})`", definition
        )
    if not any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(definition)):
        raise _Reject(f"`{function_name}` never returns a value", definition)


def _attribute_chain(node: ast.Attribute) -> tuple[str | None, list[str]]:
    """`jnp.linalg.norm` -> ("jnp", ["linalg", "norm"]); (None, [...]) when not rooted at a name."""
    attrs = []
    current: ast.AST = node
    while isinstance(current, ast.Attribute):
        attrs.append(current.attr)
        current = current.value
    attrs.reverse()
    return (current.id if isinstance(current, ast.Name) else None), attrs


def _check_node(node: ast.AST, lines: list[str], modules: dict, defined: set) -> None:
    for kind, message in _FORBIDDEN_NODES.items():
        if isinstance(node, kind):
            raise _Reject(message, node)

    if isinstance(node, ast.FunctionDef):
        if node.decorator_list:
            raise _Reject(f"decorators are not allowed (on `{node.name}`)", node)
        if node.name.startswith("_"):
            raise _Reject(
                f"function name `{node.name}` is not allowed: names starting with `_` are off "
                "limits",
                node,
            )
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            for sub in ast.walk(default):
                if not isinstance(sub, _CONSTANT_NODES):
                    raise _Reject(
                        f"default values of `{node.name}`'s parameters must be constants", node
                    )

    elif isinstance(node, ast.arg) and node.arg.startswith("_") and node.arg != "_":
        raise _Reject(
            f"parameter name `{node.arg}` is not allowed: names starting with `_` are off limits",
            node,
        )

    elif isinstance(node, ast.Name):
        name = node.id
        if name in BANNED_NAMES:
            raise _Reject(
                f"`{name}` is not allowed: candidates may not execute code, inspect the "
                "interpreter or do I/O",
                node,
            )
        if name.startswith("_") and name != "_":
            raise _Reject(
                f"the name `{name}` is not allowed: names starting with `_` (dunders and "
                "private internals) are off limits",
                node,
            )
        if isinstance(node.ctx, ast.Load) and name not in defined and name not in ALLOWED_BUILTINS:
            hint = (
                " (numpy is not available: use jnp)"
                if name in ("np", "numpy")
                else " (only jax, jnp, lax, nn and math are available)"
                if name in ("os", "sys", "torch", "scipy")
                else ""
            )
            raise _Reject(f"name `{name}` is not defined{hint}", node)

    elif isinstance(node, ast.Attribute):
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            raise _Reject(
                f"assigning or deleting attributes (`{_line_text(lines, node)}`) is not allowed: "
                "modules and arrays cannot be modified in place (use x.at[i].set(v) for arrays)",
                node,
            )
        root, attrs = _attribute_chain(node)
        if root is not None and root in modules:
            path = modules[root]
            for attr in attrs:
                path = f"{path}.{attr}"
                _check_attribute_path(path, attr, node)
        else:
            # an attribute of a value (array methods and the like); checked by name
            for attr in attrs:
                _check_attribute_path(attr, attr, node)

    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "__" in node.value:
        # strings are harmless on their own, but a dunder in one only serves an escape attempt
        raise _Reject("string constants containing `__` are not allowed", node)
