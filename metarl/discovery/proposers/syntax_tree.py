"""Where a program may be edited, read from its syntax tree: the replaceable expression
positions of a function (never assignment targets, receivers, indices or callees; booleans
marked), calls into the JAX vocabulary, numeric literals, and a copy of a function with its
local variables inlined so any subexpression can be moved elsewhere. The mutation operators
(mutation.py) choose among these; nothing here executes code.
"""

from __future__ import annotations

import ast
import copy
import math

from metarl.tasks.vocabulary import ALLOWED_MODULES, PROVIDED_MODULES

# the JAX modules of the vocabulary, by local name or path: where mutable functions live
MODULE_PREFIXES = frozenset(
    name for name, path in PROVIDED_MODULES.items() if path.startswith("jax")
) | {path for path in ALLOWED_MODULES if path.startswith("jax")}


class MutationFailed(Exception):
    """An edit that cannot be made to this program; the proposer tries another."""


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def path_expr(path: str) -> ast.expr:
    """The expression `a.b.c` for the dotted path "a.b.c" (e.g. a function to call)."""
    parts = path.split(".")
    node: ast.expr = ast.Name(id=parts[0], ctx=ast.Load())
    for part in parts[1:]:
        node = ast.Attribute(value=node, attr=part, ctx=ast.Load())
    return node


def library_call(node: ast.AST) -> tuple[str, str] | None:
    """(module path, function name) when `node` calls jnp.X / jax.nn.X / lax.X ..."""
    if not isinstance(node, ast.Call):
        return None
    dotted = _dotted(node.func)
    if not dotted or "." not in dotted:
        return None
    module, name = dotted.rsplit(".", 1)
    if module not in MODULE_PREFIXES:
        return None
    return module, name


class Site:
    """A position in the tree holding an expression that may be replaced."""

    def __init__(self, parent: ast.AST, field: str, index: int | None, boolean: bool):
        self.parent, self.field, self.index, self.boolean = parent, field, index, boolean

    @property
    def node(self) -> ast.expr:
        value = getattr(self.parent, self.field)
        return value[self.index] if self.index is not None else value

    def replace(self, new: ast.expr) -> None:
        if self.index is None:
            setattr(self.parent, self.field, new)
        else:
            getattr(self.parent, self.field)[self.index] = new


def find_function(tree: ast.Module, name: str) -> ast.FunctionDef:
    """The module-level function `name` of `tree` (MutationFailed when there is none)."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise MutationFailed(f"the program defines no function `{name}`")


def replaceable_sites(fn: ast.FunctionDef) -> list[Site]:
    """Every replaceable expression position in the function body (not targets, receivers,
    indices, callees, docstrings or the returned tuple itself)."""
    out: list[Site] = []

    def visit(node: ast.AST, in_boolean: bool = False) -> None:
        for field, value in ast.iter_fields(node):
            children = value if isinstance(value, list) else [value]
            for index, child in enumerate(children):
                if not isinstance(child, ast.AST):
                    continue
                idx = index if isinstance(value, list) else None
                if isinstance(child, ast.expr):
                    if _excluded(node, field, child):
                        continue
                    boolean = (
                        in_boolean
                        or _boolean_position(node, field, idx)
                        or isinstance(child, (ast.Compare, ast.BoolOp))
                        or (isinstance(child, ast.UnaryOp) and isinstance(child.op, ast.Not))
                    )
                    if not isinstance(child, (ast.Tuple, ast.List, ast.Starred, ast.Slice)):
                        out.append(Site(node, field, idx, boolean))
                    visit(child, boolean)
                elif isinstance(child, ast.stmt):
                    if isinstance(child, ast.Expr):  # docstrings, bare calls
                        continue
                    visit(child, False)
                elif isinstance(child, ast.keyword):
                    visit(child, in_boolean)

    for stmt in fn.body:
        if isinstance(stmt, ast.Expr):
            continue
        visit(stmt)
    return out


def _excluded(parent: ast.AST, field: str, child: ast.expr) -> bool:
    if isinstance(getattr(child, "ctx", None), (ast.Store, ast.Del)):
        return True
    if isinstance(parent, ast.Attribute):
        return True  # receivers such as `state.at`
    if isinstance(parent, ast.Subscript):
        return True  # `state[0]`, `.at[0]`: keep indices and what is indexed
    if isinstance(parent, ast.Call) and field == "func":
        return True
    if isinstance(parent, (ast.comprehension, ast.For)) and field in ("target", "iter"):
        return True
    if isinstance(child, ast.Constant) and not is_numeric(child):
        return True
    return False


def _boolean_position(parent: ast.AST, field: str, index: int | None) -> bool:
    if isinstance(parent, (ast.IfExp, ast.If, ast.While)) and field == "test":
        return True
    call = library_call(parent)
    if call and call[1] == "where" and field == "args" and index == 0:
        return True
    return False


def is_numeric(node: ast.AST) -> bool:
    """Whether `node` is an int or float literal (not a bool)."""
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def signed_constant(node: ast.AST) -> float | None:
    """The value of a numeric literal or a negated one (`-0.5`), else None."""
    if is_numeric(node):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and is_numeric(node.operand):
        return -node.operand.value
    return None


def round_sig(value: float) -> float:
    """`value` to 3 significant digits, as an edited constant is written (non-finite: 0)."""
    if value == 0 or not math.isfinite(value):
        return 0.0
    return float(f"{value:.3g}")


def constant_expr(value: float | int) -> ast.expr:
    """The literal for `value`, a negative one written as `-x` (what Python's parser makes)."""
    if value < 0:
        return ast.UnaryOp(op=ast.USub(), operand=ast.Constant(value=-value))
    return ast.Constant(value=value)


def source_line(node: ast.AST, source_lines: list[str]) -> str:
    """The stripped source line `node` starts on, or "" when it has none (a new node)."""
    lineno = getattr(node, "lineno", None)
    if lineno and 0 < lineno <= len(source_lines):
        return source_lines[lineno - 1].strip()
    return ""


def free_names(node: ast.AST) -> set[str]:
    """The names `node` reads."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def op_symbol(op: type) -> str:
    """How an operator class is written (`ast.Add` -> "+"), for an edit's description."""
    return {
        ast.Add: "+",
        ast.Sub: "-",
        ast.Mult: "*",
        ast.Div: "/",
        ast.Pow: "**",
        ast.Lt: "<",
        ast.LtE: "<=",
        ast.Gt: ">",
        ast.GtE: ">=",
    }.get(op, op.__name__)


class _Substitute(ast.NodeTransformer):
    """Replaces each read of a name in `env` by a copy of its expression."""

    def __init__(self, env: dict[str, ast.expr]):
        self.env = env

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if isinstance(node.ctx, ast.Load) and node.id in self.env:
            return copy.deepcopy(self.env[node.id])
        return node


def inline_locals(fn: ast.FunctionDef) -> ast.FunctionDef:
    """A copy of `fn` whose straight-line single-name assignments are substituted into later
    expressions, so any subexpression refers only to the arguments and library names."""
    fn = copy.deepcopy(fn)
    env: dict[str, ast.expr] = {}
    body = []
    for stmt in fn.body:
        stmt = _Substitute(env).visit(stmt)
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
        ):
            env[stmt.targets[0].id] = stmt.value
        elif isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            # tuple targets or augmented updates: later uses of these names are not inlinable
            for target in ast.walk(stmt):
                if isinstance(target, ast.Name) and isinstance(target.ctx, ast.Store):
                    env.pop(target.id, None)
        body.append(stmt)
    fn.body = body
    return fn
