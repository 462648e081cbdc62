"""The folders say what a module may import: the pure core never reaches into a shell."""

import ast
from pathlib import Path

import nw.jobs

JOBS = Path(nw.jobs.__file__).parent
SHELLS = ("nw.jobs.api", "nw.jobs.execution", "nw.jobs.web", "nw.jobs.aio")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_core_imports_no_shell() -> None:
    reaching = {
        f"{path.name} imports {name}"
        for path in (JOBS / "core").glob("*.py")
        for name in imported_modules(path)
        if name.startswith(SHELLS)
    }
    assert reaching == set()


def test_no_module_is_left_flat_beside_the_folders() -> None:
    flat = {p.name for p in JOBS.glob("*.py")}
    assert flat == {"__init__.py", "aio.py"}, "put a new module in core/, api/ or execution/"
