"""Registered kinds: by path, by callable, and from installed packages' entry points."""

from __future__ import annotations

import sys

import pytest

from nw.jobs.core import kinds


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


def test_max_attempts_above_one_makes_a_kind_retryable(fresh_registry):
    assert kinds.register_kind("k", "m:f", max_attempts=2).retryable
    assert kinds.register_kind("k", "m:f", retryable=True, max_attempts=2).retryable
    assert kinds.register_kind("k", "m:f", retryable=True).retryable
    assert not kinds.register_kind("k", "m:f").retryable
    assert not kinds.register_kind("k", "m:f", max_attempts=1).retryable


def test_a_contradictory_retry_setting_is_refused_naming_both(fresh_registry):
    with pytest.raises(ValueError, match=r"max_attempts=2 .* retryable=False") as refused:
        kinds.register_kind("k", "m:f", retryable=False, max_attempts=2)
    assert isinstance(refused.value, kinds.InvalidValue)
    assert "'k'" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(TypeError, match="max_attempts must be a whole number"):
        kinds.register_kind("k", "m:f", max_attempts=2.5)
    with pytest.raises(TypeError, match="max_attempts must be a whole number"):
        kinds.register_kind("k", "m:f", max_attempts=True)
    with pytest.raises(TypeError, match="retryable must be True or False"):
        kinds.register_kind("k", "m:f", retryable="yes")
    assert kinds.kind_spec("k") is None  # nothing refused was registered
