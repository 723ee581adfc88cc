"""The package's layers: `rl < tasks < evaluation < archives < methods < report < cli`, where the
methods are discovery, blackbox, symbolic, grpo and discogen, one folder each.

A module imports only from its own layer or below, and imports metarl modules at its top; a
method's folder never imports another method's, with one deliberate exception: grpo trains
discovery's LLM proposer, so it reads that proposer's prompts, reply extraction and parent
records from discovery (and nothing imports grpo). The
few deliberate lazy imports (CLI start-up time, the sandbox worker's preload) carry a
`# lazy:` comment on the import line or the line above it, saying why.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "metarl"
METHODS = ("discovery", "blackbox", "symbolic", "grpo", "discogen")
# method -> the methods it builds on (acyclic)
BUILDS_ON = {"grpo": ("discovery",)}
LAYERS = ["rl", "tasks", "evaluation", "archives", "methods", "report", "cli"]
MODULES = sorted(PACKAGE.rglob("*.py"))


def folder_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def layer_of(module: str) -> int:
    """The layer index of a dotted metarl module name; the package root is below everything."""
    folder = folder_of(module)
    if folder is None:
        return -1
    if folder in METHODS:
        return LAYERS.index("methods")
    if folder not in LAYERS:
        return -1 if folder in ("settings", "platform", "logs", "errors") else len(LAYERS)
    return LAYERS.index(folder)


def module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def metarl_imports(tree: ast.Module) -> list[tuple[ast.stmt, str, bool]]:
    """(node, imported module, at module level) for every import of a metarl module."""
    found = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = top and not isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            )
            if isinstance(child, ast.Import):
                found.extend(
                    (child, a.name, top) for a in child.names if a.name.split(".")[0] == "metarl"
                )
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                if child.module.split(".")[0] == "metarl":
                    found.append((child, child.module, top))
            visit(child, inside)

    visit(tree, True)
    return found


def lazy_comment_above(lines: list[str], lineno: int) -> bool:
    """Whether the group of import lines holding line `lineno` carries a `# lazy:` comment."""
    index = lineno - 1
    while index >= 0:
        text = lines[index].strip()
        if "# lazy:" in text:
            return True
        continued = text.startswith(("import ", "from ", ")", "#")) or text.endswith(",")
        if not continued:
            return False
        index -= 1
    return False


def test_every_module_belongs_to_a_known_layer():
    unknown = [module_name(p) for p in MODULES if layer_of(module_name(p)) == len(LAYERS)]
    assert not unknown, f"modules outside the layers {LAYERS}: {unknown}"


@pytest.mark.parametrize("path", MODULES, ids=[module_name(p) for p in MODULES])
def test_module_imports_only_its_layer_or_below_and_at_the_top(path):
    source = path.read_text()
    lines = source.splitlines()
    here = module_name(path)
    problems = []
    for node, imported, top in metarl_imports(ast.parse(source)):
        if folder_of(here) in METHODS and folder_of(imported) in METHODS:
            allowed = (folder_of(here), *BUILDS_ON.get(folder_of(here), ()))
            if folder_of(imported) not in allowed:
                problems.append(f"line {node.lineno}: {here} imports another method: {imported}")
        if layer_of(imported) > layer_of(here):
            problems.append(
                f"line {node.lineno}: {here} "
                f"({LAYERS[layer_of(here)] if layer_of(here) >= 0 else 'root'}) "
                f"imports {imported} from a higher layer"
            )
        if not top and not lazy_comment_above(lines, node.lineno):
            problems.append(
                f"line {node.lineno}: {here} imports {imported} inside a function "
                "without a `# lazy:` comment saying why"
            )
    assert not problems, "\n".join(problems)


def _runtime_import_graph() -> dict[str, set[str]]:
    """module -> the metarl modules it imports when it runs (lazy imports included; imports
    under `if TYPE_CHECKING:` left out: they never run)."""
    names = {module_name(path): path for path in MODULES}
    graph: dict[str, set[str]] = {name: set() for name in names}

    def visit(node: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            targets = []
            if isinstance(child, ast.Import):
                targets = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                targets = [child.module] + [f"{child.module}.{a.name}" for a in child.names]
            for target in targets:
                # a module importing its own package's __init__ is not a cycle of two modules
                if target in names and target != name and not name.startswith(target + "."):
                    graph[name].add(target)
            visit(child, name)

    for name, path in names.items():
        visit(ast.parse(path.read_text()), name)
    return graph


def test_no_import_cycle_anywhere_in_metarl():
    """Lazy imports hid two cycles (environments/gridworld/levels, and PPO dispatching to the
    meta-learners that implement its contract); a cycle is a room that does not know what it
    holds. Tarjan's strongly connected components of the runtime import graph."""
    graph = _runtime_import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                strong(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            strong(node)
    assert cycles == []


def _task_names() -> set[str]:
    from metarl.tasks import known_task_names

    return set(known_task_names())


def test_no_layer_outside_tasks_compares_a_task_name():
    """What a task is (its slot, whether it is a network, its reference) is read from its
    declaration; `task == "drift"` elsewhere is a place a new task silently skips."""
    names = _task_names()
    found = []
    for path in MODULES:
        if module_name(path).startswith("metarl.tasks"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            for side in [node.left, *node.comparators]:
                constants = (
                    side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                )
                for constant in constants:
                    if isinstance(constant, ast.Constant) and constant.value in names:
                        found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert found == []


def test_no_module_over_600_lines_and_no_cli_function_over_120():
    """A room a reader takes in at once: a module is one idea, a command parses, builds its
    options and calls the layer below."""
    long_files = [
        f"{path.relative_to(PACKAGE.parent)} ({n})"
        for path in MODULES
        if (n := len(path.read_text().splitlines())) > 600
    ]
    long_functions = [
        f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1})"
        for path in sorted((PACKAGE / "cli").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > 120
    ]
    assert (long_files, long_functions) == ([], [])
