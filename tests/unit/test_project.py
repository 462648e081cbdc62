from __future__ import annotations

import json

import pytest

import nw
from nw.project import as_project


def test_init_creates_the_folder_and_a_stable_id(tmp_path):
    p = nw.Project.init(tmp_path / "a" / "b", title="Film")
    assert p.root == (tmp_path / "a" / "b").resolve()
    assert p.title == "Film"
    again = nw.Project(str(tmp_path / "a" / "b"))
    assert again.project_id == p.project_id and len(p.project_id) == 32


def test_opening_writes_nothing_and_a_plain_path_is_accepted(tmp_path):
    assert as_project(tmp_path).root == tmp_path.resolve()
    nw.Project(tmp_path).read_meta()
    assert list(tmp_path.iterdir()) == []


def test_a_moved_project_keeps_its_id(tmp_path):
    p = nw.Project.init(tmp_path / "here")
    pid = p.project_id
    (tmp_path / "here").rename(tmp_path / "there")
    assert nw.Project(tmp_path / "there").project_id == pid


@pytest.mark.parametrize("content", ["{not json", json.dumps({"title": "no id"}), "[]"])
def test_unreadable_metadata_is_a_clear_error(tmp_path, content):
    (tmp_path / ".nw").mkdir()
    (tmp_path / ".nw" / "project.json").write_text(content)
    with pytest.raises(nw.ProjectError, match=r"project\.json"):
        _ = nw.Project(tmp_path).project_id


def test_not_a_folder(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(nw.ProjectError, match="is not a folder"):
        nw.Project(tmp_path / "f")
    with pytest.raises(TypeError):
        as_project(42)
