"""The `term` operator's two edits: a task's building blocks (tasks/building_blocks.py) swapped
for one another where a program uses them, or added to its output.

Both edit the syntax tree only (nothing is executed). A term is written with the contract's
argument names and renamed, by position, to the candidate's own; a term that would read a
name the candidate does not have is not used.
"""

from __future__ import annotations

import ast
import copy
import random

from metarl.discovery.proposers.syntax_tree import (
    MutationFailed,
    constant_expr,
    free_names,
    is_numeric,
    replaceable_sites,
    source_line,
)
from metarl.tasks.building_blocks import BuildingBlocks
from metarl.tasks.vocabulary import PROVIDED_MODULES


class _Rename(ast.NodeTransformer):
    def __init__(self, names: dict[str, str]):
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(id=self.names.get(node.id, node.id), ctx=node.ctx)


def parse_term(text: str, fn: ast.FunctionDef, arguments: tuple[str, ...]) -> ast.expr:
    """The term `text` as an expression over `fn`'s arguments (renamed from the contract's
    `arguments` by position).

    Raises:
        MutationFailed: the term reads a name that `fn` neither takes nor is given.
    """
    own = [a.arg for a in fn.args.args]
    node = _Rename(dict(zip(arguments, own))).visit(ast.parse(text, mode="eval").body)
    missing = free_names(node) - set(own) - set(PROVIDED_MODULES)
    if missing:
        raise MutationFailed(f"the program has no argument {sorted(missing)[0]!r} for a term")
    return node


def canonical(node: ast.AST) -> str:
    """`node` as text with every numeric literal a float, so `ratio - 1` is `ratio - 1.0`."""
    node = copy.deepcopy(node)
    for child in ast.walk(node):
        if is_numeric(child):
            child.value = float(child.value)
    return ast.unparse(node)


def swap_term(
    fn: ast.FunctionDef,
    blocks: BuildingBlocks,
    arguments: tuple[str, ...],
    rng: random.Random,
    lines: list[str],
) -> str:
    """Replace one occurrence of a swap group's term in `fn` by another term of its group.

    Returns:
        The edit's description.

    Raises:
        MutationFailed: the program uses no term of any group.
    """
    groups = []  # per group, its terms that fit `fn` with their canonical texts
    for group in blocks.swaps:
        parsed = []
        for text in group:
            try:
                term = parse_term(text, fn, arguments)
            except MutationFailed:
                continue
            parsed.append((term, canonical(term)))
        groups.append(parsed)
    matches = []  # (site, the other terms of its group)
    for site in replaceable_sites(fn):
        if site.boolean:
            continue
        text = canonical(site.node)
        for parsed in groups:
            if any(c == text for _, c in parsed):
                matches.append((site, [t for t, c in parsed if c != text]))
    matches = [(site, others) for site, others in matches if others]
    if not matches:
        raise MutationFailed("the program uses none of the task's swappable terms")
    site, others = rng.choice(matches)
    old = ast.unparse(site.node)
    line = source_line(site.node, lines)
    new = copy.deepcopy(rng.choice(others))
    site.replace(new)
    return f"term: `{old}` -> `{ast.unparse(new)}`" + (f" in `{line}`" if line else "")


def add_term(
    fn: ast.FunctionDef,
    blocks: BuildingBlocks,
    arguments: tuple[str, ...],
    rng: random.Random,
) -> str:
    """Add `coefficient * term` to what `fn` returns (the `output` element of a returned
    tuple), for one of the task's additions.

    Returns:
        The edit's description.

    Raises:
        MutationFailed: `fn` does not end in a return of the expected form, or no addition
            fits its arguments.
    """
    last = fn.body[-1] if fn.body else None
    if not isinstance(last, ast.Return) or last.value is None:
        raise MutationFailed("the program does not end in a return")
    value = last.value
    if blocks.output is not None and (
        not isinstance(value, ast.Tuple) or len(value.elts) <= blocks.output
    ):
        raise MutationFailed("the program does not return the task's tuple")
    terms = []
    for text in blocks.additions:
        try:
            terms.append(parse_term(text, fn, arguments))
        except MutationFailed:
            continue
    if not terms:
        raise MutationFailed("no addition fits the program's arguments")
    term = rng.choice(terms)
    scaled = ast.BinOp(left=constant_expr(blocks.draw_coefficient(rng)), op=ast.Mult(), right=term)
    if blocks.output is None:
        last.value = ast.BinOp(left=value, op=ast.Add(), right=scaled)
    else:
        output = value.elts[blocks.output]
        value.elts[blocks.output] = ast.BinOp(left=output, op=ast.Add(), right=scaled)
    return f"term: added `{ast.unparse(scaled)}` to the output"
