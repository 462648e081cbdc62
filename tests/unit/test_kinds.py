"""Registered kinds: by path, by callable, and from installed packages' entry points."""

from __future__ import annotations

import sys

import pytest

from nw.jobs import kinds


@pytest.fixture
def fresh_registry(monkeypatch):
    monkeypatch.setattr(kinds, "_KINDS", {})
    monkeypatch.setattr(kinds, "_entry_points_loaded", False)


def test_an_installed_package_declares_kinds_by_entry_point(tmp_path, monkeypatch, fresh_registry):
    dist = tmp_path / "render_pack-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: render-pack\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[nw.jobs.kinds]\npack.upscale = render_pack:upscale\n")
    (tmp_path / "render_pack.py").write_text("def upscale(project, params):\n    return {'x': 2}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "pack.upscale" in kinds.registered_kinds()
    assert "render_pack" not in sys.modules  # declared, not imported
    assert kinds.kind_spec("pack.upscale").load()(None, {}) == {"x": 2}


def test_registration_checks_its_arguments(fresh_registry):
    with pytest.raises(ValueError, match="module:attr"):
        kinds.register_kind("k", "no_colon")
    with pytest.raises(ValueError, match="non-empty"):
        kinds.register_kind(" ", "m:f")
    with pytest.raises(TypeError):
        kinds.register_kind("k", 42)
    with pytest.raises(ValueError, match="max_attempts"):
        kinds.register_kind("k", "m:f", max_attempts=0)


def test_a_target_that_does_not_import_names_the_path(fresh_registry):
    spec = kinds.register_kind("k", "no_such_pkg.sub:render")
    with pytest.raises(kinds.KindImportError, match=r"no_such_pkg\.sub:render"):
        spec.load()
    callable_spec = kinds.register_kind("c", len)
    assert callable_spec.load() is len and callable_spec.path == "builtins:len"
