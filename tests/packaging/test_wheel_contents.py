"""What the wheel (and the sdist it is built from) ships: every data file of
the package, beside its modules, and the marker that says it is typed. A file
left out of the wheel passes every test of an editable install and breaks
every user, so the built archives are read here."""

from __future__ import annotations

import email
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import nw

from .conftest import ROOT

pytestmark = pytest.mark.slow

DATA_SUFFIXES = {".sql", ".json", ".html", ".css", ".js"}


def package_files(*, data: bool) -> set[str]:
    """The package's files in this checkout, as paths from the root (``nw/...``)."""
    found = set()
    for path in (ROOT / "nw").rglob("*"):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        is_data = path.suffix in DATA_SUFFIXES or "pg_migrations" in path.parts
        if is_data if data else path.suffix == ".py":
            found.add(path.relative_to(ROOT).as_posix())
    return found


def wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def test_the_checkout_has_the_data_files_this_test_is_about() -> None:
    data = package_files(data=True)
    # the kinds named by the issue, so an empty glob cannot pass the test below
    assert any(name.startswith("nw/jobs/stores/pg_migrations/") for name in data)
    for name in (
        "nw/jobs/stores/sqlite_schema.sql",
        "nw/jobs/stores/sql/postgres_queries.sql",
        "nw/jobs/stores/sql/sqlite_queries.sql",
        "nw/jobs/stores/sql/sqlite_upgrades.sql",
        "nw/jobs/web/static/index.html",
        "nw/jobs/web/static/tray.css",
        "nw/jobs/web/static/tray.js",
        "nw/pricing_data/nw-fal.json",
    ):
        assert name in data


def test_the_wheel_ships_every_data_file_migration_and_py_typed(dist: dict[str, Path]) -> None:
    names = wheel_names(dist["wheel"])
    missing = sorted((package_files(data=True) | {"nw/py.typed"}) - names)
    assert missing == [], f"left out of the wheel: {missing}"


def test_the_wheel_ships_every_module(dist: dict[str, Path]) -> None:
    missing = sorted(package_files(data=False) - wheel_names(dist["wheel"]))
    assert missing == [], f"left out of the wheel: {missing}"


def test_the_sdist_ships_every_package_file(dist: dict[str, Path]) -> None:
    with tarfile.open(dist["sdist"]) as archive:
        # "nw_jobs-0.2.0/nw/..." -> "nw/..."
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    wanted = package_files(data=True) | package_files(data=False) | {"nw/py.typed"}
    missing = sorted(wanted - names)
    assert missing == [], f"left out of the sdist: {missing}"


def test_the_wheel_is_the_version_nw_says(dist: dict[str, Path]) -> None:
    with zipfile.ZipFile(dist["wheel"]) as archive:
        (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        version = email.message_from_bytes(archive.read(meta))["Version"]
    assert version == nw.__version__
    assert dist["wheel"].name.startswith(f"nw_jobs-{nw.__version__}-")
    assert dist["sdist"].name == f"nw_jobs-{nw.__version__}.tar.gz"


def test_the_command_line_says_the_same_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nw.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"nw-jobs {nw.__version__}"


def test_the_changelog_has_a_section_for_this_version_under_unreleased() -> None:
    headings = [
        line.split("]")[0].removeprefix("## [")
        for line in (ROOT / "CHANGELOG.md").read_text().splitlines()
        if line.startswith("## [")
    ]
    assert headings[:2] == ["Unreleased", nw.__version__]
