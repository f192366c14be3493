"""The code's own prose names only what exists: every repository path a docstring or a
comment names, and every package map (the module list in a package's docstring) names
each of its package's modules and nothing else. Reads text only, so it runs in a moment.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CODE = sorted(p for top in ("app", "workers", "tests", "migrations")
              for p in (REPO_ROOT / top).rglob("*.py"))
CONFIGS = [REPO_ROOT / name for name in ("config.toml", "Makefile", "Procfile",
                                         "pyproject.toml", ".ci/run")]
# Sample texts that hold paths as data, not as references.
DATA = {REPO_ROOT / "tests/reliability/secrets_corpus.py"}

PATH = re.compile(r"(?<![\w./~$<>:-])((?:app|workers|tests|migrations|docs|\.ci)/[\w./*-]*[\w*/])")
MAP_ENTRY = re.compile(r"(?<![\w/.-])([a-z_][a-z0-9_]*(?:\.py|/))(?=[\s:,;).])")
PACKAGES = sorted(p.parent for top in ("app", "workers")
                  for p in (REPO_ROOT / top).rglob("__init__.py"))


def _exists(path: str) -> bool:
    path = path.rstrip(".,;:")
    if "*" in path:
        return any(REPO_ROOT.glob(path))
    return (REPO_ROOT / path).exists()


def rel(path: Path) -> str:
    return path.relative_to(REPO_ROOT).as_posix()


@pytest.mark.parametrize("source", [p for p in CODE + CONFIGS if p not in DATA], ids=rel)
def test_every_path_the_code_names_exists(source: Path) -> None:
    text = source.read_text(encoding="utf-8")
    missing = [f"line {text[:m.start()].count(chr(10)) + 1}: {m.group(1)}"
               for m in PATH.finditer(text) if not _exists(m.group(1))]
    assert missing == [], f"{rel(source)} names paths that do not exist"


def package_map(package: Path) -> set[str]:
    """The modules (name.py) and subpackages (name/) a package's docstring lists."""
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    return set(MAP_ENTRY.findall(docstring))


def modules_of(package: Path) -> set[str]:
    found = {p.name for p in package.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    found |= {f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").exists()}
    return found


MAPPED = [p for p in PACKAGES if len(package_map(p)) >= 2]


@pytest.mark.parametrize("package", MAPPED, ids=rel)
def test_a_package_map_names_only_modules_that_exist(package: Path) -> None:
    named = package_map(package)
    gone = {n for n in named if not (package / n).exists() and not (REPO_ROOT / n).exists()}
    assert gone == set(), f"{rel(package)}/__init__.py names modules that are not there"


@pytest.mark.parametrize("package", [p for p in MAPPED if p != REPO_ROOT / "app"], ids=rel)
def test_a_package_map_names_every_module_of_its_package(package: Path) -> None:
    unnamed = modules_of(package) - package_map(package)
    assert unnamed == set(), f"{rel(package)}/__init__.py does not say what these are"


def test_the_wings_have_maps() -> None:
    wings = {rel(p) for p in MAPPED}
    assert {"app", "app/api", "app/learn", "app/memory", "app/model", "app/recall",
            "app/turn", "app/tasks", "app/ops", "app/ui", "workers"} <= wings


def _modules() -> dict[str, Path]:
    found = {}
    for package in ("app", "workers"):
        for path in (REPO_ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _declared_exports(path: Path) -> list[str] | None:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return None


def test_every_module_says_what_it_exports() -> None:
    """`__all__` is a module's interface, in code (as httpx writes it): every module that
    defines a public name declares it, and each name it declares exists."""
    missing, unknown = [], []
    for name, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        exports = _declared_exports(path)
        defines = [node for node in tree.body if isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and not node.name.startswith("_")]
        if exports is None:
            if defines:
                missing.append(name)
            continue
        bound = {alias.asname or alias.name.split(".")[0]
                 for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                 for alias in node.names}
        bound |= {node.name for node in ast.walk(tree)
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        bound |= {name.id for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AnnAssign))
                  for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                  for name in ast.walk(target) if isinstance(name, ast.Name)}
        unknown += [f"{name}.{export}" for export in exports if export not in bound]
    assert missing == [], "declare __all__ in these modules"
    assert unknown == [], unknown


def test_modules_import_only_what_another_exports() -> None:
    """Nothing of app/ or workers/ reaches into another module past its `__all__`."""
    modules = _modules()
    exports = {name: _declared_exports(path) for name, path in modules.items()}
    reaching = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0
                    and node.module in modules and node.module != name):
                continue
            declared = exports[node.module] or []
            reaching += [f"{name} imports {node.module}.{alias.name}" for alias in node.names
                         if alias.name not in declared and not alias.name.startswith("__")
                         and f"{node.module}.{alias.name}" not in modules]
    assert reaching == [], reaching
