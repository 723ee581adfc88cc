"""Code near-duplicates: a normalised form of a program and a similarity between two, so that a
proposal that is nearly an archived program is re-asked before it costs an evaluation.

Why. Exact repeats are caught by the normalised source hash (tasks/candidate.py `source_hash`),
but a language model asked to improve a program often returns it with its variables renamed,
its comments and docstring rewritten, or the same expression laid out differently. Such a
proposal is no new idea, and its evaluation (a trace, a compile per environment, training)
is spent for nothing. ShinkaEvolve rejects near-duplicate proposals before evaluating them;
this is the cheap, deterministic version of that, without embeddings or an LLM judge.

The normalised form (`normalised_tokens`). The program is parsed with `ast`; statements that
are only a constant (docstrings, stray strings) are dropped, comments never reach the tree;
every name the program binds (function and lambda arguments, assigned locals, loop and
comprehension targets, its function names, import aliases) is renamed to `_0`, `_1`, ... in
order of first appearance, while the names it only reads (jnp, jax, lax, math, builtins)
and attribute names are kept; numeric constants are kept, written as floats to the 4
significant digits the behaviour fingerprint also rounds to (so `2` and `2.0` are one
token, and 0.2 vs 0.2001 is no new idea). `ast.unparse` then lays it out canonically and
Python's tokenizer cuts it into tokens (indentation as INDENT/DEDENT tokens). Source that does
not parse is cut into word and symbol tokens of its raw text.

The similarity (`token_similarity`): difflib's SequenceMatcher ratio over the two token
sequences, 2 M / (|a| + |b|) with M the tokens of the longest matching blocks, in [0, 1];
1.0 exactly when the normalised forms are equal. Chosen over Jaccard of token n-grams because
it respects order (the same tokens in another arrangement are another program) and degrades
gracefully: one changed token in n changes the ratio by about 1/n, where an n-gram set loses
n-grams around the change. It depends on length (one changed token in a program of n tokens
leaves 1 - 1/n), so the threshold is chosen with the task's program sizes in mind (config.py
`code_novelty`: 0.995 keeps one-token edits of programs up to ~200 tokens).

Speed (measured on a 2-core machine, 3000 archived mutants of the seed programs, ~140 tokens
each). Normalising a program takes ~0.7 ms; the results are cached by source text (the last
`CACHE_SIZE` programs), so a generation's `CodeIndex` costs ~2 s the first time and little
after. A search sets the proposal as SequenceMatcher's second sequence (its analysis is
cached) and skips every archived program whose cheap upper bounds (length ratio, then token
multiset overlap) cannot reach the threshold: ~2 ms per proposal against all 3000 (~1 ms when
an exact copy stops it early); without a threshold (`at_least=0`), when little can be
skipped, ~0.5 s.
"""

from __future__ import annotations

import ast
import difflib
import functools
import io
import logging
import re
import tokenize
from typing import Iterable, Mapping

logger = logging.getLogger(__name__)

CACHE_SIZE = 8192  # normalised programs kept (a few MB)
_RAW_TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|\S")
_SKIPPED = (tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER)


class _Binder(ast.NodeVisitor):
    """Collects every name a tree binds (arguments, stored names, defs, import aliases)."""

    def __init__(self) -> None:
        self.bound: set[str] = set()

    def visit_arg(self, node: ast.arg) -> None:
        self.bound.add(node.arg)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self.bound.add(node.id)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.bound.add(node.name)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.bound.add(node.name)
        self.generic_visit(node)

    def visit_alias(self, node: ast.alias) -> None:
        self.bound.add(node.asname or node.name.split(".")[0])


class _Canonical(ast.NodeTransformer):
    """Renames bound names to `_0`, `_1`, ... in order of first appearance (a traversal in
    field order, which depends on the tree's shape only, so renamed copies agree), rounds
    numeric constants, and drops constant-only statements."""

    def __init__(self, bound: set[str]):
        self.bound = bound
        self.names: dict[str, str] = {}

    def _name(self, name: str) -> str:
        if name not in self.bound:
            return name
        return self.names.setdefault(name, f"_{len(self.names)}")

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self._name(node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.arg = self._name(node.arg)
        node.annotation = None
        return node

    def visit_FunctionDef(self, node):
        node.name = self._name(node.name)
        node.returns = None
        return self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        node.name = self._name(node.name)
        return self.generic_visit(node)

    def visit_alias(self, node: ast.alias) -> ast.alias:
        node.asname = self._name(node.asname or node.name.split(".")[0])
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        value = node.value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                node.value = float(f"{float(value):.4g}")
            except OverflowError:  # an int too large for a float: kept as written
                pass
        return node

    def generic_visit(self, node: ast.AST) -> ast.AST:
        node = super().generic_visit(node)
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and body and all(isinstance(s, ast.stmt) for s in body):
                kept = [s for s in body if not _constant_statement(s)]
                setattr(node, name, kept or ([ast.Pass()] if name == "body" else []))
        return node


def _constant_statement(statement: ast.stmt) -> bool:
    """A statement that is only a constant (a docstring, a stray string or number)."""
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)


def raw_tokens(code: str) -> tuple[str, ...]:
    """Word and symbol tokens of `code` as written (for source that does not parse)."""
    return tuple(_RAW_TOKEN.findall(code))


def normalised_source(code: str) -> str | None:
    """`code` without docstrings, with canonical names and rounded constants, laid out by
    `ast.unparse`; None when it does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    binder = _Binder()
    binder.visit(tree)
    try:
        tree = _Canonical(binder.bound).visit(tree)
        return ast.unparse(ast.fix_missing_locations(tree))
    except (RecursionError, ValueError) as error:  # a pathologically deep program
        logger.info("normalising a program failed (%s); compared as raw text", error)
        return None


@functools.lru_cache(maxsize=CACHE_SIZE)
def normalised_tokens(code: str) -> tuple[str, ...]:
    """The token sequence code similarity compares (see the module docstring)."""
    source = normalised_source(code)
    if source is None:
        return raw_tokens(code)
    tokens = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in _SKIPPED:
                continue
            if token.type == tokenize.INDENT:
                tokens.append("INDENT")
            elif token.type == tokenize.DEDENT:
                tokens.append("DEDENT")
            else:
                tokens.append(token.string)
    except (tokenize.TokenError, SyntaxError):  # unparse output always tokenizes; be safe
        return raw_tokens(source)
    return tuple(tokens)


def token_similarity(a: tuple[str, ...], b: tuple[str, ...]) -> float:
    """SequenceMatcher's ratio of two token sequences, in [0, 1] (1.0 for two empty ones)."""
    if not a and not b:
        return 1.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def similarity(a: str, b: str) -> float:
    """How alike two programs are after normalisation, in [0, 1]: 1.0 for the same program
    renamed, reformatted or re-commented."""
    return token_similarity(normalised_tokens(a), normalised_tokens(b))


class CodeIndex:
    """Archived programs, normalised once, that proposals are compared with.

    Args:
        programs: candidate id -> source, in the order ties are broken (earliest first).
    """

    def __init__(self, programs: Mapping[str, str] | None = None):
        self.tokens: dict[str, tuple[str, ...]] = {}
        for cid, code in (programs or {}).items():
            self.add(cid, code)

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, candidate_id: str, code: str) -> None:
        """Index `code` as `candidate_id`'s program (a later add of the same id replaces it)."""
        self.tokens[candidate_id] = normalised_tokens(code)

    def nearest(self, code: str, at_least: float = 0.0) -> tuple[str | None, float]:
        """The indexed program most similar to `code` (the earliest on ties).

        Args:
            code: the program.
            at_least: only a program at least this similar counts (the rest are skipped
                after cheap upper bounds: what makes a search for near-duplicates fast).

        Returns:
            (candidate id, similarity); (None, 0.0) when no program counts.
        """
        return nearest_tokens(normalised_tokens(code), self.tokens.items(), at_least)


def nearest_tokens(
    tokens: tuple[str, ...],
    indexed: Iterable[tuple[str, tuple[str, ...]]],
    at_least: float = 0.0,
) -> tuple[str | None, float]:
    """The (id, similarity) of the entry of `indexed` most similar to `tokens`, if it is at
    least `at_least` similar; else (None, 0.0). Entries whose upper bounds (difflib's
    real_quick_ratio and quick_ratio) cannot reach the best so far are skipped."""
    matcher = difflib.SequenceMatcher(None, autojunk=False)
    matcher.set_seq2(tokens)  # its analysis is cached over every comparison
    best_id, best = None, -1.0
    floor = at_least
    for cid, other in indexed:
        if not tokens and not other:
            score = 1.0
        else:
            matcher.set_seq1(other)
            bar = max(best, floor)
            if matcher.real_quick_ratio() < bar or matcher.quick_ratio() < bar:
                continue
            score = matcher.ratio()
        if score < floor:
            continue
        if score > best:
            best_id, best = cid, score
            if best >= 1.0:
                break
    return (best_id, best) if best_id is not None else (None, 0.0)


def nearest(
    code: str, archived: Mapping[str, str], at_least: float = 0.0
) -> tuple[str | None, float]:
    """The archived program most similar to `code`: (candidate id, similarity in [0, 1]);
    (None, 0.0) when `archived` (candidate id -> source) is empty or none is `at_least` that
    similar. For many proposals against the same programs, build a `CodeIndex` once."""
    return CodeIndex(archived).nearest(code, at_least)


def rejection_note(candidate_id: str, similarity_value: float | None) -> str:
    """The one-line note a re-asked proposer reads about its rejected program (similarity
    None: the same program as the candidate)."""
    if similarity_value is None:
        return (
            f"your program was the same as candidate {candidate_id} (already evaluated); "
            "propose something that behaves differently"
        )
    return (
        f"your program was {similarity_value:.0%} the same as candidate {candidate_id} after "
        "normalisation (names, comments and layout aside); propose something that behaves "
        "differently"
    )


def near_duplicate_reason(candidate_id: str, similarity_value: float, threshold: float) -> str:
    """Why a slot whose proposals stayed near-duplicates is settled without evaluation."""
    return (
        f"nearly the same program as candidate {candidate_id}: similarity "
        f"{similarity_value:.3f} after normalisation (names, comments and layout aside; "
        f"near-duplicates are at least {threshold:g})"
    )


def summary_line(state: Mapping | None, config: Mapping | None = None) -> str:
    """The run summary's line about the evaluations near-duplicate rejection saved.

    Args:
        state: a discovery run's state (`RunState.to_dict()`, as `runs.state` stores it; its
            counts are written once they are not 0).
        config: the run's options (`DiscoverConfig.to_dict()`): a run made with near-duplicate
            rejection has `code_novelty` there, so its absent counts are zeros.

    Returns:
        The line; "" for a run that does not count near-duplicates (another method's, or a
        discovery run from before they were counted).
    """
    state, config = state or {}, config or {}
    keys = ("near_duplicates_code", "near_duplicates_behaviour")
    if not any(key in state for key in keys) and "code_novelty" not in config:
        return ""
    code, behaviour = (int(state.get(key) or 0) for key in keys)
    return (
        f"near-duplicates rejected before training: {code + behaviour} "
        f"(code {code}, behaviour {behaviour})"
    )
