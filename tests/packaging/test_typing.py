"""What a type checker sees of nw's public surface. ``nw.jobs`` imports its
facade and console on first use (``__getattr__``, typed ``object``), so each
of those names must also be imported under ``TYPE_CHECKING``, or a user's
wrong call to it passes the checker (the installed-wheel check proves the
effect for a few calls; this keeps the list whole)."""

from __future__ import annotations

import ast
from pathlib import Path

import nw.jobs


def _imported(nodes: list[ast.stmt]) -> set[str]:
    return {
        alias.asname or alias.name
        for node in nodes
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_every_public_name_imported_on_first_use_is_visible_to_a_type_checker() -> None:
    tree = ast.parse(Path(nw.jobs.__file__).read_text())
    eager = _imported(tree.body)
    typed: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typed |= _imported(node.body)
    lazy = set(nw.jobs.__all__) - eager
    assert lazy, "nw.jobs imports nothing on first use: this test is about nothing"
    assert sorted(lazy - typed) == [], "add them to nw/jobs/__init__.py's TYPE_CHECKING imports"
    assert sorted(typed - set(nw.jobs.__all__)) == []
