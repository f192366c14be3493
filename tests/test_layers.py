"""The architecture, read from the tree: the folders are the layers, which only point down.

Every module of `app/` and `workers/` belongs to the layer of the folder it stands in; a
module may import its own layer and the ones below it, never one above. The store, the
model, recall, the turn and learning therefore never reach the queue or a front-end: the
turn is handed its queue hand-off, and the queue's jobs are registered by whoever starts
the consumer. A function-level import of the project's own code is allowed only for
start-up time, and says so.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "workers")

# The wings, lowest first: a module's layer is the folder it stands in. `app/`'s own
# modules and app/memory/ are the store; each folder under app/ is one wing; workers/ is
# the queue runtime. The HTTP front-ends share what app/http/ holds and never import each
# other; the server puts them on one app, and the command line starts everything.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("store", ("app", "app.memory")),
    ("tasks", ("app.tasks",)),
    ("model", ("app.model",)),
    ("recall", ("app.recall",)),
    ("turn", ("app.turn",)),
    ("learn", ("app.learn",)),
    ("queue", ("workers",)),
    ("operations", ("app.ops",)),
    ("http", ("app.http",)),
    ("front-ends", ("app.api", "app.mcp", "app.ui")),
    ("server", ("app.serve",)),
    ("command line", ("app.cli",)),
]
ABOVE_THE_CORE = ("queue", "operations", "http", "front-ends", "server", "command line")
RANK = {name: rank for rank, (name, _) in enumerate(LAYERS)}
WINGS = {folder: name for name, folders in LAYERS for folder in folders}
START_UP_NOTE = "start-up"
MAX_ROOT_MODULES = 12
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 60


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def folder_of(path: Path) -> str:
    """The package a module stands in, to the wing's depth: app/turn/tools/web.py → app.turn."""
    parts = path.relative_to(REPO).parent.parts
    return ".".join(parts[:2])


def folder_of_module(module: str) -> str:
    return folder_of(project_modules()[module])


def layer_of(module: str) -> str | None:
    path = project_modules().get(module)
    return WINGS.get(folder_of(path)) if path else None


@functools.cache
def project_modules() -> dict[str, Path]:
    return {module_name(path): path
            for package in PACKAGES for path in sorted((REPO / package).rglob("*.py"))}


def imported(module: str, node: ast.Import | ast.ImportFrom, known: set[str]) -> list[str]:
    """The project modules an import statement loads (`from app import x` may name one)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: from the importing module's package
            package = module.split(".")[: -node.level]
            base = ".".join([*package, base] if base else package)
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                 for alias in node.names]
    found = []
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name:
            found.append(name)
    return found


def imports_of(path: Path, module: str, known: set[str]) -> list[tuple[str, int, int, bool]]:
    """(imported module, line, line of the enclosing function or 0, under TYPE_CHECKING)
    for each import."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[str, int, int, bool]] = []

    def visit(node: ast.AST, function_line: int, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in imported(module, child, known):
                    if target != module:
                        found.append((target, child.lineno, function_line, type_only))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child.lineno, type_only)
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                visit(child, function_line, True)
            else:
                visit(child, function_line, type_only)

    visit(tree, 0, False)
    return found


def graph() -> tuple[dict[str, Path], dict[str, list[tuple[str, int, int, bool]]]]:
    modules = project_modules()
    known = set(modules)
    return modules, {name: imports_of(path, name, known) for name, path in modules.items()}


def test_every_module_has_a_layer() -> None:
    unplaced = [name for name in project_modules() if layer_of(name) is None]
    assert unplaced == [], f"place these modules in a layer of {__name__}: {unplaced}"


def test_every_folder_of_app_is_a_wing() -> None:
    folders = {folder_of(path) for path in project_modules().values()}
    assert folders - set(WINGS) == set(), "a new folder under app/ names its wing in LAYERS"


def test_the_root_of_app_holds_the_store_and_at_most_a_dozen_modules() -> None:
    root = sorted(path.name for path in (REPO / "app").glob("*.py") if path.name != "__init__.py")
    assert len(root) <= MAX_ROOT_MODULES, root


def test_no_module_is_over_800_lines() -> None:
    long = {name: lines for name, path in project_modules().items()
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_no_function_is_over_60_lines() -> None:
    """A function longer than a screen does several things: it reads as named steps
    (docstring and signature counted)."""
    long = {f"{name}:{node.name}": node.end_lineno - node.lineno + 1
            for name, path in project_modules().items()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES}
    assert long == {}


def test_learning_is_plain_functions_with_no_queue() -> None:
    """app/learn/ is called by the queue, the CLI and tests alike: it never imports Huey."""
    queued = [name for name, path in project_modules().items()
              if layer_of(name) == "learn"
              and any(isinstance(node, (ast.Import, ast.ImportFrom))
                      and any((alias.name if isinstance(node, ast.Import) else node.module or "")
                              .split(".")[0] == "huey" for alias in node.names)
                      for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))))]
    assert queued == []


def test_layers_only_point_down() -> None:
    _, edges = graph()
    upward = []
    for module, targets in edges.items():
        here = layer_of(module)
        for target, line, _, type_only in targets:
            there = layer_of(target)
            if here and there and not type_only and RANK[there] > RANK[here]:
                upward.append(f"{module}:{line} ({here}) imports {target} ({there})")
    assert upward == []


def test_the_wings_below_the_queue_never_import_it_or_a_front_end() -> None:
    _, edges = graph()
    bad = [f"{module}:{line} imports {target}"
           for module, targets in edges.items()
           if layer_of(module) in ("store", "tasks", "model", "recall", "turn", "learn")
           for target, line, _, _ in targets
           if layer_of(target) in ABOVE_THE_CORE]
    assert bad == []


def test_no_front_end_imports_another() -> None:
    """The JSON API, the memory page and MCP share only what stands below them (app/http,
    and the data the turn inspector renders, app/ops/turn_view.py): as datasette renders
    one view's data as HTML or JSON."""
    _, edges = graph()
    crossing = [f"{module}:{line} imports {target}"
                for module, targets in edges.items() if layer_of(module) == "front-ends"
                for target, line, _, _ in targets
                if layer_of(target) == "front-ends" and folder_of_module(target) != folder_of_module(module)]
    assert crossing == []


def test_no_import_cycles_type_only_imports_included() -> None:
    """A circle through a type-only import is still two modules that need each other:
    one of them holds what belongs to neither."""
    _, edges = graph()
    adjacency = {module: sorted({t for t, _, _, _ in targets})
                 for module, targets in edges.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in adjacency.get(module, []):
            if state.get(target) == 1:
                cycles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(adjacency):
        if module not in state:
            visit(module)
    assert cycles == []


def says_lazy_for_start_up(lines: list[str]) -> bool:
    """A command module may say once, in a top-level comment, that its commands import
    what they use when they run (every `hilo` run imports every command module)."""
    return any(line.startswith("#") and START_UP_NOTE in line for line in lines)


def test_function_level_imports_of_our_own_code_are_only_for_start_up_time() -> None:
    modules, edges = graph()
    hidden = []
    for module, targets in edges.items():
        lines = modules[module].read_text(encoding="utf-8").splitlines()
        if layer_of(module) in ("front-ends", "command line") and says_lazy_for_start_up(lines):
            continue
        for target, line, function_line, type_only in targets:
            if not function_line or type_only:
                continue
            # The note may stand once at the top of the function, above several imports.
            if START_UP_NOTE not in " ".join(lines[function_line - 1:line]):
                hidden.append(f"{module}:{line} imports {target} inside a function")
    assert hidden == [], ("import at the top of the module, or say in a comment in the "
                          f"function, above the import, that it is lazy for {START_UP_NOTE} time")


@pytest.mark.parametrize("module", ["app.turn.chat", "app.turn.context", "app.memory", "app.writer",
                                    "app.learn.session"])
def test_a_core_module_imported_alone_loads_no_queue_or_front_end(module: str) -> None:
    """The same rule at run time: importing the turn, learning or the core loads no queue
    or front-end code."""
    import subprocess
    import sys

    probe = (f"import sys, {module}; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'workers' "
             "or m.split('.')[0] == 'huey' or m.startswith(('app.api', 'app.cli', 'app.http', 'app.mcp', 'app.serve', 'app.ui'))))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "[]"
