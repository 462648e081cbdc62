"""A project is a folder; its machine state lives under ``<root>/.nw/``.

The project's identity is a random id written once into ``.nw/project.json``
(at ``Project.init`` or, lazily, at the first write). Job ids and the
PostgreSQL namespace derive from that id rather than from the path, so two
hosts that mount one project at different paths agree on every job id.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from nw.errors import InvalidType, ProjectError

META_DIR = ".nw"
META_FILE = "project.json"


class Project:
    """A folder that holds renders and their jobs.

    ``Project(path)`` opens an existing folder and writes nothing;
    ``Project.init(path, title=...)`` creates the folder and its metadata.
    """

    def __init__(self, root: str | os.PathLike[str]):
        path = Path(root).expanduser()
        if not path.is_dir():
            reason = "does not exist" if not path.exists() else "is not a folder"
            raise ProjectError(f"project folder {str(path)!r} {reason}")
        self.root = path.resolve()
        self._meta: dict | None = None

    @classmethod
    def init(cls, root: str | os.PathLike[str], *, title: str | None = None) -> Project:
        path = Path(root).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        project = cls(path)
        project._ensure_meta(title=title)
        return project

    @property
    def meta_dir(self) -> Path:
        return self.root / META_DIR

    @property
    def title(self) -> str:
        return self.read_meta().get("title") or self.root.name

    @property
    def project_id(self) -> str:
        """The stable id (created on first need: a write path)."""
        return self._ensure_meta()["project_id"]

    def read_meta(self) -> dict:
        """The metadata if the project was initialised, else ``{}``; writes nothing."""
        if self._meta is not None:
            return self._meta
        try:
            raw = (self.meta_dir / META_FILE).read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            meta = json.loads(raw)
            if not isinstance(meta, dict) or not isinstance(meta.get("project_id"), str):
                raise ValueError("no project_id")
        except ValueError as exc:
            raise ProjectError(
                f"project metadata {str(self.meta_dir / META_FILE)!r} is unreadable: {exc}"
            ) from None
        self._meta = meta
        return meta

    def _ensure_meta(self, *, title: str | None = None) -> dict:
        meta = self.read_meta()
        if meta:
            return meta
        self.meta_dir.mkdir(parents=True, exist_ok=True)
        fresh = {"project_id": uuid.uuid4().hex, "title": title or self.root.name}
        tmp = self.meta_dir / f".{META_FILE}.{uuid.uuid4().hex}.tmp"
        tmp.write_text(json.dumps(fresh, indent=2), encoding="utf-8")
        try:
            # link() fails if another process initialised it first: theirs wins.
            os.link(tmp, self.meta_dir / META_FILE)
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        self._meta = None
        return self.read_meta()

    def __fspath__(self) -> str:
        return str(self.root)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Project) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    def __repr__(self) -> str:
        return f"Project({str(self.root)!r})"


def as_project(project: Project | str | os.PathLike[str]) -> Project:
    """Every public function takes a ``Project`` or a plain path."""
    if isinstance(project, Project):
        return project
    if isinstance(project, (str, os.PathLike)):
        return Project(project)
    raise InvalidType(f"project must be a Project or a path, not {type(project).__name__}")
