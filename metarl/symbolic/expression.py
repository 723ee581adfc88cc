"""A small expression tree: the one form every symbolic backend's result is turned into.

pyoperon hands back a postfix tree of its own nodes and PySR a Julia-printed string; neither is
something the rest of the package should know about. Each backend converts its model into this
tree once (`Constant`, `Variable`, `Call` over the operators in OPERATORS), and everything
downstream works on it: the readable formula, the candidate source, and a JAX function that
computes exactly what the source computes (so the errors a fit reports are the candidate's own
without executing generated code).

The inputs are the three regression features of a (ratio, advantage) sample: `log_r` = log r,
`r1` = r - 1 and `A` = the advantage. All three are 0 or unchanged at r = 1, which is what the
candidate uses to make its drift exactly 0 there.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple, Union

import numpy as np

from metarl.errors import MetarlError

VARIABLES = ("log_r", "r1", "A")


class SymbolicError(MetarlError):
    """A symbolic fit that cannot become a candidate (or a backend that cannot run); the message
    says why."""


class Inputs(NamedTuple):
    """The regression features of a set of samples (arrays of one shape)."""

    log_r: Any
    r1: Any
    A: Any

    @classmethod
    def of(cls, ratio: np.ndarray, advantage: np.ndarray) -> Inputs:
        """The float32 features of (ratio, advantage) samples.

        Args:
            ratio: strictly positive policy ratios.
            advantage: advantages, of the shape of `ratio`.

        Returns:
            `log r`, `r - 1` and the advantage, computed in float32 as the candidate does.
        """
        ratio = np.asarray(ratio, np.float32)
        return cls(np.log(ratio), ratio - np.float32(1.0), np.asarray(advantage, np.float32))

    def columns(self) -> np.ndarray:
        """The features as the columns of an `[n, 3]` float32 matrix, in VARIABLES order."""
        return np.column_stack([np.ravel(x) for x in self]).astype(np.float32)


@dataclass(frozen=True)
class Constant:
    value: float


@dataclass(frozen=True)
class Variable:
    name: str  # one of VARIABLES


@dataclass(frozen=True)
class Call:
    operator: str  # a key of OPERATORS
    args: tuple[Expression, ...]


Expression = Union[Constant, Variable, Call]


@dataclass(frozen=True)
class Operator:
    """One operator: its arity, how it reads, and how it computes.

    `apply(xp, *args)` computes it with the array module `xp` (numpy or jax.numpy);
    `source(*args)` writes it as candidate source over argument sources (vocabulary: jnp only).
    `infix` is the symbol of a binary infix operator (with its precedence), or None for a
    function written `name(args)` with `readable` as its name.
    """

    arity: int | None  # None: n-ary (add, mul)
    apply: Callable[..., Any]
    source: Callable[..., str]
    readable: str
    infix: str | None = None
    precedence: int = 3  # 1: + -, 2: * /, 3: atoms and calls


def _sum(xp, *args):
    total = args[0]
    for arg in args[1:]:
        total = total + arg
    return total


def _product(xp, *args):
    total = args[0]
    for arg in args[1:]:
        total = total * arg
    return total


OPERATORS: dict[str, Operator] = {
    "add": Operator(None, _sum, lambda *a: "(" + " + ".join(a) + ")", "+", "+", 1),
    "sub": Operator(2, lambda xp, a, b: a - b, lambda a, b: f"({a} - {b})", "-", "-", 1),
    "mul": Operator(None, _product, lambda *a: "(" + " * ".join(a) + ")", "*", "*", 2),
    "div": Operator(2, lambda xp, a, b: a / b, lambda a, b: f"({a} / {b})", "/", "/", 2),
    # the analytic quotient (Ni et al., 2013): division without a pole, so a fitted `x / r1`
    # cannot put an infinite value or a NaN gradient at r = 1
    "aq": Operator(
        2,
        lambda xp, a, b: a / xp.sqrt(1.0 + xp.square(b)),
        lambda a, b: f"({a} / jnp.sqrt(1.0 + jnp.square({b})))",
        "aq",
    ),
    "fmax": Operator(
        2, lambda xp, a, b: xp.maximum(a, b), lambda a, b: f"jnp.maximum({a}, {b})", "max"
    ),
    "fmin": Operator(
        2, lambda xp, a, b: xp.minimum(a, b), lambda a, b: f"jnp.minimum({a}, {b})", "min"
    ),
    "square": Operator(1, lambda xp, a: xp.square(a), lambda a: f"jnp.square({a})", "square"),
    "tanh": Operator(1, lambda xp, a: xp.tanh(a), lambda a: f"jnp.tanh({a})", "tanh"),
    "abs": Operator(1, lambda xp, a: xp.abs(a), lambda a: f"jnp.abs({a})", "abs"),
    "exp": Operator(1, lambda xp, a: xp.exp(a), lambda a: f"jnp.exp({a})", "exp"),
    "log": Operator(1, lambda xp, a: xp.log(a), lambda a: f"jnp.log({a})", "log"),
    "sqrt": Operator(1, lambda xp, a: xp.sqrt(a), lambda a: f"jnp.sqrt({a})", "sqrt"),
}

# names a readable formula may use for an operator (PySR writes max/min, we write max/min)
_FUNCTION_NAMES = {
    **{op.readable: name for name, op in OPERATORS.items() if op.infix is None},
    **{name: name for name, op in OPERATORS.items() if op.infix is None},
}
_INFIX_NODES = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}


def call(operator: str, *args: Expression) -> Call:
    """`Call(operator, args)`, checking the operator and its arity.

    Raises:
        SymbolicError: an unknown operator or a wrong number of arguments.
    """
    if operator not in OPERATORS:
        raise SymbolicError(f"unknown operator {operator!r}; known: {', '.join(OPERATORS)}")
    arity = OPERATORS[operator].arity
    if (arity is None and len(args) < 2) or (arity is not None and len(args) != arity):
        raise SymbolicError(f"operator {operator!r} got {len(args)} arguments")
    return Call(operator, tuple(args))


def evaluate(expression: Expression, inputs: Mapping[str, Any] | Inputs, xp: Any) -> Any:
    """The value of `expression` at `inputs`, computed with the array module `xp`.

    Args:
        expression: the tree.
        inputs: the arrays of the variables (an `Inputs`, or a mapping by name).
        xp: `numpy` or `jax.numpy`.

    Returns:
        An array broadcast from the inputs (a Python float when the tree has no variable).
    """
    values = inputs._asdict() if isinstance(inputs, Inputs) else inputs

    def walk(node: Expression) -> Any:
        if isinstance(node, Constant):
            return node.value
        if isinstance(node, Variable):
            return values[node.name]
        return OPERATORS[node.operator].apply(xp, *(walk(arg) for arg in node.args))

    return walk(expression)


def size(expression: Expression) -> int:
    """The number of nodes of the tree."""
    if isinstance(expression, Call):
        return 1 + sum(size(arg) for arg in expression.args)
    return 1


def depth(expression: Expression) -> int:
    """The depth of the tree (a leaf has depth 1)."""
    if isinstance(expression, Call):
        return 1 + max(depth(arg) for arg in expression.args)
    return 1


def constants(expression: Expression) -> list[float]:
    """The constants of the tree, in order."""
    if isinstance(expression, Constant):
        return [expression.value]
    if isinstance(expression, Call):
        return [value for arg in expression.args for value in constants(arg)]
    return []


def variables(expression: Expression) -> set[str]:
    """The names of the variables the tree uses."""
    if isinstance(expression, Variable):
        return {expression.name}
    if isinstance(expression, Call):
        return set().union(*(variables(arg) for arg in expression.args))
    return set()


def format_constant(value: float) -> str:
    """The shortest decimal that reads back as the same float32 (`0.1`, `-2.5e-07`).

    Raises:
        SymbolicError: the value is not finite (it cannot be written as a literal).
    """
    single = np.float32(value) if abs(value) <= float(np.finfo(np.float32).max) else np.inf
    if not math.isfinite(single):
        raise SymbolicError(f"the expression has a constant that is not a finite float32: {value}")
    text = str(single)  # numpy prints the shortest decimal that reads back as this float32
    return text if ("." in text or "e" in text) else text + ".0"


def readable(expression: Expression) -> str:
    """A human-readable infix formula (`0.5 * abs(A) * square(r1)`); `parse` reads it back.

    Args:
        expression: the tree.

    Returns:
        The formula, with the fewest parentheses that keep its meaning.
    """

    def walk(node: Expression) -> tuple[str, int]:
        if isinstance(node, Constant):
            text = format_constant(node.value)
            return text, (0 if text.startswith("-") else 3)
        if isinstance(node, Variable):
            return node.name, 3
        operator = OPERATORS[node.operator]
        parts = [walk(arg) for arg in node.args]
        if operator.infix is None:
            return f"{operator.readable}({', '.join(text for text, _ in parts)})", 3
        words = []
        for index, (text, precedence) in enumerate(parts):
            # a right operand of - or / needs parentheses at equal precedence: a - (b - c)
            tight = index > 0 and node.operator in ("sub", "div")
            if precedence < operator.precedence or (tight and precedence == operator.precedence):
                text = f"({text})"
            words.append(text)
        return f" {operator.infix} ".join(words), operator.precedence

    return walk(expression)[0]


def parse(text: str) -> Expression:
    """The tree of an infix formula over VARIABLES (what `readable` and PySR write).

    Reads numbers, the variables, `+ - * /`, unary minus, `x ** 2` / `x ^ 2` as square, and
    calls of the functions in OPERATORS (by their readable or operon names: `max`, `fmax`,
    `aq`, `square`, ...). The text is parsed with `ast` into a tree, never evaluated.

    Args:
        text: the formula.

    Returns:
        Its tree.

    Raises:
        SymbolicError: the text is not such a formula.
    """
    try:
        tree = ast.parse(text.replace("^", "**"), mode="eval")
    except SyntaxError as error:
        raise SymbolicError(f"cannot parse the formula {text!r}: {error.msg}") from error

    def walk(node: ast.AST) -> Expression:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return Constant(float(node.value))
        if isinstance(node, ast.Name) and node.id in VARIABLES:
            return Variable(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            operand = walk(node.operand)
            if isinstance(node.op, ast.UAdd):
                return operand
            if isinstance(operand, Constant):
                return Constant(-operand.value)
            return call("mul", Constant(-1.0), operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _INFIX_NODES:
            return call(_INFIX_NODES[type(node.op)], walk(node.left), walk(node.right))
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Pow)
            and isinstance(node.right, ast.Constant)
            and node.right.value == 2
        ):
            return call("square", walk(node.left))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCTION_NAMES
            and not node.keywords
        ):
            return call(_FUNCTION_NAMES[node.func.id], *(walk(arg) for arg in node.args))
        raise SymbolicError(
            f"cannot read `{ast.unparse(node)}` in the formula {text!r}: expected numbers, "
            f"the variables {', '.join(VARIABLES)}, + - * /, and calls of "
            f"{', '.join(sorted(_FUNCTION_NAMES))}"
        )

    return walk(tree.body)
