"""The embedded, LLM-free proposer: program search on the candidate's syntax tree.

Operators (each returns a new program or gives up, and the proposer then tries another):

- `constant`: perturb one numeric literal (log-normal scaling, a small shift, or a "round"
  value); structural constants (0, 1, -1) and integer exponents are changed more cautiously.
- `function`: swap an elementwise function for another of the allowed jnp / jax.nn vocabulary,
  preferring one of the same family (rectifier, squashing, exp/log...); maximum <-> minimum;
  swap the branches of a `where`.
- `operator`: swap an arithmetic operator (+ - * /) or a comparison (< <= > >=).
- `insert`: wrap a subexpression in an elementwise function, or combine it with a constant or
  with another subexpression of the same program.
- `delete`: replace an operation by one of its operands (`f(x)` -> `x`, `a * b` -> `a`).
- `crossover` (two parents): replace a subexpression of the first parent by one of the second,
  with the second parent's local variables inlined so the graft only uses the arguments.
- `family`: a whole member of one of the task's parametric families (tasks/families.py: an
  asymmetric clip, DPO's alpha and beta, a KL penalty, Lion's betas...) at random parameters,
  in place of an edit of the parent: a jump out of the seeds' neighbourhood that keeps the
  contract. Only for tasks that declare families.
- `term`: one of the task's building blocks (tasks/building_blocks.py: log r, r - 1, A for a
  drift, the symbolic layer's inputs; the gradient, momenta and progress for an optimizer)
  swapped for another of its group where the program uses one, or added to the program's output
  times a coefficient (a KL penalty, weight decay...), terms chosen to keep the contract. Only
  for tasks that declare building blocks.

The proposer never executes code (the parent process must not): validity comes from editing
only value positions of the tree, keeping booleans boolean and indices intact; the cascade's
probes judge the rest. Each request carries an RNG seed, so a run is reproducible and a resumed
run re-proposes exactly the same program for the same request.
"""

from __future__ import annotations

import ast
import copy
import math
import random
from typing import Any

from metarl.discovery.proposers.base import Proposal, ProposalRequest
from metarl.discovery.proposers.syntax_tree import (
    MutationFailed,
    Site,
    constant_expr,
    find_function,
    free_names,
    inline_locals,
    is_numeric,
    library_call,
    op_symbol,
    path_expr,
    replaceable_sites,
    round_sig,
    signed_constant,
    source_line,
)
from metarl.discovery.proposers.terms import add_term, swap_term
from metarl.evaluation.outcome import Outcome
from metarl.tasks.building_blocks import BuildingBlocks, signature_arguments
from metarl.tasks.candidate import normalise_source, source_hash

# Elementwise unary functions, by family: name -> the module path it is written with.
# `rectifier`s are non-negative (swapping among them keeps e.g. a drift >= 0); `smooth` ones
# look like a relu but dip below zero.
UNARY_FAMILIES: dict[str, list[str]] = {
    "rectifier": ["jax.nn.relu", "jax.nn.softplus", "jnp.abs", "jnp.square", "jax.nn.relu6"],
    "smooth": ["jax.nn.elu", "jax.nn.gelu", "jax.nn.silu"],
    "squashing": ["jnp.tanh", "jax.nn.sigmoid", "jax.nn.soft_sign", "jnp.arctan"],
    "exp": ["jnp.exp", "jnp.expm1"],
    "log": ["jnp.log", "jnp.log1p"],
    "root": ["jnp.sqrt", "jnp.cbrt"],
}
UNARY = {path.rsplit(".", 1)[1]: path for paths in UNARY_FAMILIES.values() for path in paths}
FAMILY_OF = {path.rsplit(".", 1)[1]: fam for fam, paths in UNARY_FAMILIES.items() for path in paths}
# Safe to wrap around anything (no domain restriction): used by `insert`.
WRAPPERS = [
    "jnp.tanh",
    "jax.nn.relu",
    "jax.nn.softplus",
    "jax.nn.sigmoid",
    "jnp.abs",
    "jnp.square",
    "jax.nn.soft_sign",
    "jnp.arctan",
    "jax.nn.silu",
    "jnp.log1p_abs",
]
BINARY_SWAPS = {"maximum": "minimum", "minimum": "maximum", "fmax": "fmin", "fmin": "fmax"}
ARITH = [ast.Add, ast.Sub, ast.Mult, ast.Div]
COMPARE = [ast.Lt, ast.LtE, ast.Gt, ast.GtE]
ROUND_VALUES = [0.0, 0.1, 0.2, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0]

DEFAULT_WEIGHTS = {
    "constant": 0.25,
    "function": 0.17,
    "operator": 0.13,
    "insert": 0.17,
    "delete": 0.08,
    "family": 0.10,
    "term": 0.10,
}


def _call(path: str, *args: ast.expr) -> ast.Call:
    if path == "jnp.log1p_abs":  # log(1 + |x|): a domain-safe squashing wrapper
        inner = ast.Call(func=path_expr("jnp.abs"), args=list(args), keywords=[])
        return ast.Call(func=path_expr("jnp.log1p"), args=[inner], keywords=[])
    return ast.Call(func=path_expr(path), args=list(args), keywords=[])


# -- operators -------------------------------------------------------------------------------


class Editor:
    """Applies one operator to a parsed program; records a one-line description.

    Args:
        tree: the parsed program (edited in place).
        function_name: the task's function, the one edited.
        rng: the request's generator.
        source: the program's text (descriptions quote its lines).
        blocks: the task's building blocks (the `term` operator), with `arguments`, the
            contract's argument names they are written with.
    """

    def __init__(
        self,
        tree: ast.Module,
        function_name: str,
        rng: random.Random,
        source: str,
        blocks: BuildingBlocks | None = None,
        arguments: tuple[str, ...] = (),
    ):
        self.tree = tree
        self.fn = find_function(tree, function_name)
        self.rng = rng
        self.lines = source.splitlines()
        self.blocks, self.arguments = blocks, arguments
        self.description = ""

    def value_sites(self) -> list[Site]:
        return [s for s in replaceable_sites(self.fn) if not s.boolean]

    # constant -----------------------------------------------------------------------------
    def constant(self) -> None:
        sites = [s for s in replaceable_sites(self.fn) if is_numeric(s.node)]
        if not sites:
            raise MutationFailed("no numeric constant to perturb")
        weights = []
        for site in sites:
            value = site.node.value
            structural = value in (0, 1) or (
                isinstance(site.parent, ast.BinOp) and isinstance(site.parent.op, ast.Pow)
            )
            weights.append(0.25 if structural else 1.0)
        site = self.rng.choices(sites, weights)[0]
        old = site.node.value
        in_pow = (
            isinstance(site.parent, ast.BinOp)
            and isinstance(site.parent.op, ast.Pow)
            and site.field == "right"
        )
        if isinstance(old, int) or in_pow:
            if in_pow and isinstance(old, int):
                choices = [v for v in (1, 2, 3, 4) if v != old]
            elif in_pow:
                choices = [v for v in (0.5, 1.0, 2.0, 3.0) if v != old]
            else:
                choices = [v for v in (old - 1, old + 1, old * 2) if v >= 0 and v != old]
            new = self.rng.choice(choices or [old + 1])
        else:
            roll = self.rng.random()
            if roll < 0.65 and old != 0:
                new = round_sig(old * math.exp(self.rng.gauss(0.0, 0.5)))
            elif roll < 0.85:
                new = round_sig(old + self.rng.gauss(0.0, 0.25 * max(1.0, abs(old))))
            else:
                new = float(self.rng.choice([v for v in ROUND_VALUES if v != old] or [old + 1]))
            if new == old:
                new = round_sig(old * 1.5 if old else 0.5)
        line = source_line(site.node, self.lines)
        site.replace(constant_expr(new))
        self.description = f"constant {old!r} -> {new!r}" + (f" in `{line}`" if line else "")

    # function -----------------------------------------------------------------------------
    def function(self) -> None:
        calls = []
        for site in replaceable_sites(self.fn):
            lib = library_call(site.node)
            if lib and (
                lib[1] in UNARY
                and len(site.node.args) == 1
                or lib[1] in BINARY_SWAPS
                or (lib[1] == "where" and len(site.node.args) == 3)
            ):
                calls.append(site)
        if not calls:
            raise MutationFailed("no elementwise function to swap")
        site = self.rng.choice(calls)
        node = site.node
        module, name = library_call(node)
        line = source_line(node, self.lines)
        if name == "where":
            node.args[1], node.args[2] = node.args[2], node.args[1]
            self.description = f"swapped the branches of where in `{line}`"
            return
        if name in BINARY_SWAPS:
            new = BINARY_SWAPS[name]
            node.func = path_expr(f"jnp.{new}")
            self.description = f"{name} -> {new} in `{line}`"
            return
        family = FAMILY_OF[name]
        same = [p for p in UNARY_FAMILIES[family] if not p.endswith("." + name)]
        others = [
            p
            for p in UNARY.values()
            if FAMILY_OF[p.rsplit(".", 1)[1]] != family
            and FAMILY_OF[p.rsplit(".", 1)[1]] in ("rectifier", "squashing", "smooth")
        ]
        pool = same if (same and self.rng.random() < 0.85) else others
        new_path = self.rng.choice(pool)
        node.func = path_expr(new_path)
        self.description = f"{module}.{name} -> {new_path} in `{line}`"

    # operator -----------------------------------------------------------------------------
    def operator(self) -> None:
        sites = []
        for node in ast.walk(self.fn):
            if isinstance(node, ast.BinOp) and type(node.op) in ARITH + [ast.Pow]:
                sites.append(node)
            elif isinstance(node, ast.Compare) and all(type(op) in COMPARE for op in node.ops):
                sites.append(node)
        if not sites:
            raise MutationFailed("no operator to swap")
        node = self.rng.choice(sites)
        line = source_line(node, self.lines)
        if isinstance(node, ast.Compare):
            i = self.rng.randrange(len(node.ops))
            old = type(node.ops[i])
            new = self.rng.choice([op for op in COMPARE if op is not old])
            node.ops[i] = new()
        else:
            old = type(node.op)
            if old is ast.Pow:
                new = ast.Mult
            else:
                partner = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}
                new = (
                    partner[old]
                    if self.rng.random() < 0.6
                    else self.rng.choice([op for op in ARITH if op is not old])
                )
            node.op = new()
        self.description = f"operator {op_symbol(old)} -> {op_symbol(new)} in `{line}`"

    # insert -------------------------------------------------------------------------------
    def insert(self) -> None:
        sites = self.value_sites()
        if not sites:
            raise MutationFailed("no subexpression to extend")
        site = self.rng.choice(sites)
        target = site.node
        line = source_line(target, self.lines)
        old_text = ast.unparse(target)
        roll = self.rng.random()
        if roll < 0.4:
            wrapper = self.rng.choice(WRAPPERS)
            new = _call(wrapper, target)
            what = f"wrapped `{old_text}` in {wrapper.replace('jnp.log1p_abs', 'log1p(|.|)')}"
        elif roll < 0.65:
            value = round_sig(math.exp(self.rng.gauss(0.0, 0.7)))
            op = self.rng.choice([ast.Mult, ast.Add, ast.Sub])
            new = ast.BinOp(left=target, op=op(), right=ast.Constant(value=value))
            what = f"`{old_text}` -> `{old_text} {op_symbol(op)} {value}`"
        else:
            # other subexpressions of this program, with its locals inlined so that the copy
            # only refers to the arguments (a local may not be defined yet at the target)
            args = {a.arg for a in self.fn.args.args} | {"jax", "jnp", "lax", "nn", "math"}
            text = ast.unparse(target)
            pool = [
                s.node
                for s in replaceable_sites(inline_locals(self.fn))
                if not s.boolean
                and not is_numeric(s.node)
                and free_names(s.node) <= args
                and ast.unparse(s.node) != text
            ]
            if not pool:
                raise MutationFailed("no other subexpression to combine with")
            other = copy.deepcopy(self.rng.choice(pool))
            scale = round_sig(math.exp(self.rng.gauss(math.log(0.3), 0.7)))
            op = self.rng.choice([ast.Add, ast.Sub, ast.Mult])
            term = (
                other
                if op is ast.Mult
                else ast.BinOp(left=ast.Constant(value=scale), op=ast.Mult(), right=other)
            )
            if op is ast.Mult:
                term = _call(
                    self.rng.choice(["jnp.tanh", "jax.nn.sigmoid", "jax.nn.softplus"]), other
                )
            new = ast.BinOp(left=target, op=op(), right=term)
            what = f"`{old_text}` -> `{ast.unparse(new)}`"
        site.replace(new)
        self.description = f"insert: {what}" + (f" in `{line}`" if line else "")

    # delete -------------------------------------------------------------------------------
    def delete(self) -> None:
        candidates = []
        for site in self.value_sites():
            node = site.node
            if isinstance(node, ast.BinOp) and type(node.op) in ARITH + [ast.Pow]:
                candidates.append(
                    (
                        site,
                        [node.left, node.right]
                        if not isinstance(node.op, ast.Pow)
                        else [node.left],
                    )
                )
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
                candidates.append((site, [node.operand]))
            else:
                lib = library_call(node)
                if lib and lib[1] in UNARY and len(node.args) == 1:
                    candidates.append((site, [node.args[0]]))
                elif lib and lib[1] == "where" and len(node.args) == 3:
                    candidates.append((site, [node.args[1], node.args[2]]))
                elif lib and lib[1] in BINARY_SWAPS and len(node.args) == 2:
                    candidates.append((site, list(node.args)))
        # keep what remains meaningful: do not reduce a subtree to a bare constant
        candidates = [
            (s, [k for k in keep if signed_constant(k) is None]) for s, keep in candidates
        ]
        candidates = [(s, keep) for s, keep in candidates if keep]
        if not candidates:
            raise MutationFailed("nothing to delete")
        site, keep = self.rng.choice(candidates)
        old_text = ast.unparse(site.node)
        kept = self.rng.choice(keep)
        site.replace(kept)
        self.description = f"delete: `{old_text}` -> `{ast.unparse(kept)}`"

    # term ---------------------------------------------------------------------------------
    def term(self) -> None:
        """Swap one of the task's building blocks for another of its group, or (when the
        program uses none, or half the time) add one to the output."""
        if self.blocks is None:
            raise MutationFailed("the task declares no building blocks")
        if self.blocks.swaps and self.rng.random() < 0.5:
            try:
                self.description = swap_term(
                    self.fn, self.blocks, self.arguments, self.rng, self.lines
                )
                return
            except MutationFailed:
                pass
        self.description = add_term(self.fn, self.blocks, self.arguments, self.rng)

    # crossover ----------------------------------------------------------------------------
    def crossover(self, donor_source: str, function_name: str, donor_name: str) -> None:
        donor_fn = find_function(ast.parse(donor_source), function_name)
        inlined = inline_locals(donor_fn)
        args = {a.arg for a in self.fn.args.args}
        allowed = args | {"jax", "jnp", "lax", "nn", "math"}
        pool = []
        for site in replaceable_sites(inlined):
            node = site.node
            if site.boolean or is_numeric(node) or isinstance(node, ast.Name):
                continue
            if free_names(node) <= allowed:
                pool.append(node)
        if not pool:
            raise MutationFailed("the donor has no transplantable subexpression")
        targets = [s for s in self.value_sites() if not is_numeric(s.node)]
        if not targets:
            raise MutationFailed("the recipient has no subexpression to replace")
        graft = copy.deepcopy(self.rng.choice(pool))
        site = self.rng.choice(targets)
        old_text = ast.unparse(site.node)
        site.replace(graft)
        self.description = (
            f"crossover: `{old_text}` replaced by `{ast.unparse(graft)}` from {donor_name}"
        )


# -- the proposer ----------------------------------------------------------------------------


def _root_name(name: str) -> str:
    return (name or "candidate").split(".")[0].split("~")[0] or "candidate"


class MutationProposer:
    """LLM-free proposer. One parent: mutation (sometimes two chained); two parents: crossover."""

    name = "mutation"

    def __init__(
        self,
        weights: dict[str, float] | None = None,
        chain_probability: float = 0.25,
        max_tries: int = 25,
    ):
        self.weights = dict(weights or DEFAULT_WEIGHTS)
        unknown = set(self.weights) - set(DEFAULT_WEIGHTS)
        if unknown:
            raise ValueError(f"unknown mutation operators: {sorted(unknown)}")
        self.chain_probability = chain_probability
        self.max_tries = max_tries
        self.proposed = 0
        self.operator_counts: dict[str, int] = {}

    # -- the contract --
    def propose(self, request: ProposalRequest) -> Proposal:
        if not request.parents:
            return Proposal(code=None, proposer=self.name, failure="no parent to mutate")
        rng = random.Random(request.rng_seed)
        parent = request.parents[0]
        function_name = request.task.function_name
        parent_norm = normalise_source(parent.code)
        forbidden = {parent_norm} | {normalise_source(p.code) for p in request.parents[1:]}
        blocks = request.task.building_blocks
        arguments = signature_arguments(request.task.signature)
        excluded = set() if blocks else {"term"}  # operators this task cannot use
        errors = []
        for _ in range(self.max_tries):
            try:
                tree = ast.parse(parent.code)
            except SyntaxError as error:
                return Proposal(
                    code=None,
                    proposer=self.name,
                    parent_ids=[p.id for p in request.parents],
                    failure=f"the parent does not parse: {error}",
                )
            try:
                editor = Editor(tree, function_name, rng, parent.code, blocks, arguments)
                descriptions = []
                root = _root_name(parent.name)
                families = request.task.families
                operator = None
                if len(request.parents) < 2 and families:
                    operator = self._pick(rng, excluded)
                if operator == "family":
                    family = rng.choice(families)
                    source, values = family.draw(rng)
                    tree = ast.parse(source)
                    editor = Editor(tree, function_name, rng, source, blocks, arguments)
                    editor.description = f"family {family.describe(values)}: {family.reference}"
                    root = family.name
                elif operator is not None:
                    getattr(editor, operator)()
                elif len(request.parents) >= 2:
                    donor = request.parents[1]
                    try:
                        editor.crossover(donor.code, function_name, donor.name or donor.id)
                        operator = "crossover"
                    except MutationFailed:
                        operator = self._pick(rng, excluded | {"family"})
                        getattr(editor, operator)()
                else:
                    operator = self._pick(rng, excluded | {"family"})
                    getattr(editor, operator)()
                descriptions.append(editor.description)
                if operator != "crossover" and rng.random() < self.chain_probability:
                    second = self._pick(rng, excluded | {"family"})
                    try:
                        getattr(editor, second)()
                        descriptions.append(editor.description)
                        operator = f"{operator}+{second}"
                    except MutationFailed:
                        pass
                ast.fix_missing_locations(tree)
                code = ast.unparse(tree) + "\n"
                compile(code, "<mutant>", "exec")
            except (MutationFailed, SyntaxError, ValueError, TypeError, RecursionError) as error:
                errors.append(str(error))
                continue
            if normalise_source(code) in forbidden:
                errors.append("the edit left the program unchanged")
                continue
            self.proposed += 1
            self.operator_counts[operator] = self.operator_counts.get(operator, 0) + 1
            parents = request.parents[:2] if operator == "crossover" else request.parents[:1]
            return Proposal(
                code=code,
                name=f"{root}.{source_hash(code)[:5]}",
                thought="; ".join(descriptions),
                parent_ids=[p.id for p in parents],
                proposer=f"mutation:{operator.split('+')[0]}",
                operator=operator,
            )
        reasons = sorted(set(errors))[:3]
        return Proposal(
            code=None,
            proposer=self.name,
            parent_ids=[p.id for p in request.parents[:1]],
            failure=f"no valid edit after {self.max_tries} tries ({'; '.join(reasons)})",
        )

    def _pick(self, rng: random.Random, excluded: set[str]) -> str:
        """An operator by weight, other than the `excluded` ones (`family` where the program in
        hand is edited, not replaced; `term` for a task without building blocks)."""
        names = [n for n in self.weights if n not in excluded]
        if not names:
            raise MutationFailed("no edit operator has a weight")
        return rng.choices(names, [self.weights[n] for n in names])[0]

    def feedback(self, proposal: Proposal, outcome: Outcome, candidate_id: str) -> None:
        return None

    def get_state(self) -> dict[str, Any]:
        return {"proposed": self.proposed, "operator_counts": dict(self.operator_counts)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.proposed = int(state.get("proposed", 0))
        self.operator_counts = dict(state.get("operator_counts", {}))

    def drain_messages(self) -> list[dict[str, str]]:
        return []

    def restore_messages(self, messages: list[dict[str, str]]) -> None:
        return None
