"""What `make serve` and `make test` would install (`make -n`, in a copy of the Makefile with a
stand-in venv): the broker alone for `make serve`, the extras and system packages for `make
test`, and each again when pyproject.toml changes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SERVE_INSTALL = ".venv/bin/python -m pip install --quiet -e .\n"
EXTRAS_INSTALL = ".venv/bin/python -m pip install --quiet -e '.[spark,test,bench]'"


NATIVE_CRATES = ("sticky_assign", "record_batch")


def _native_build(crate: str) -> str:
    return f"/bin/python -m pip install --quiet ./native/{crate}/\n"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(REPO / name, tmp_path / name)
    # The compiled crates' sources, which the Makefile names as prerequisites (copied now, so
    # older than the stamps `_stamps` makes).
    for crate in NATIVE_CRATES:
        shutil.copytree(REPO / "native" / crate, tmp_path / "native" / crate,
                        ignore=shutil.ignore_patterns("target"), copy_function=shutil.copy)
    return tmp_path


def _plan(checkout: Path, target: str) -> str:
    """The commands `make` would run for `target`, none of them run (as from a shell: under
    `make test` the outer make's variables would have it print directories and flags)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    return subprocess.run(["make", "-n", target], cwd=checkout, capture_output=True, text=True,
                          check=True, timeout=60, env=env).stdout


def _stamps(checkout: Path, *names: str, newer_than_pyproject: bool = True) -> None:
    """A venv as an earlier `make` left it: its stamps, newer (or older) than pyproject.toml."""
    venv = checkout / ".venv"
    venv.mkdir(exist_ok=True)
    pip_version = next(line.split(":=")[1].strip() for line in
                     (checkout / "Makefile").read_text().splitlines()
                     if line.startswith("PIP_VERSION :="))
    when = (checkout / "pyproject.toml").stat().st_mtime + (60 if newer_than_pyproject else -60)
    for name in (f".pip-{pip_version}", *names):
        (venv / name).touch()
        os.utime(venv / name, (when, when))


def test_a_fresh_make_serve_installs_the_package_alone(checkout: Path) -> None:
    plan = _plan(checkout, "serve")
    assert SERVE_INSTALL in plan
    assert "spark" not in plan and "apt-get" not in plan and "mvn" not in plan
    assert plan.rstrip().endswith("--data-dir ./kgroups-data")


def test_make_test_after_make_serve_installs_the_extras_and_system_packages(
    checkout: Path,
) -> None:
    _stamps(checkout, ".installed-serve")
    assert SERVE_INSTALL not in _plan(checkout, "serve")
    plan = _plan(checkout, "test")
    assert EXTRAS_INSTALL in plan and "apt-get install" in plan


def test_both_reinstall_when_pyproject_changes(checkout: Path) -> None:
    _stamps(checkout, ".installed", ".installed-serve")
    assert EXTRAS_INSTALL not in _plan(checkout, "test")
    assert SERVE_INSTALL not in _plan(checkout, "serve")
    _stamps(checkout, ".installed", ".installed-serve", newer_than_pyproject=False)
    assert EXTRAS_INSTALL in _plan(checkout, "test")
    assert SERVE_INSTALL in _plan(checkout, "serve")


@pytest.mark.parametrize(("crate", "stamp", "for_serve"), [
    ("sticky_assign", ".installed-sticky-assign", False),  # `kgroups assign` runs it in Python
    ("record_batch", ".installed-record-batch", True),  # the broker's commit path
])
def test_make_install_builds_each_compiled_crate_and_again_when_it_changes(
    checkout: Path, crate: str, stamp: str, for_serve: bool,
) -> None:
    build = _native_build(crate)
    _stamps(checkout, ".installed", ".installed-serve")
    assert build in _plan(checkout, "install")
    assert (build in _plan(checkout, "serve")) is for_serve
    _stamps(checkout, ".installed", ".installed-serve", stamp)
    assert build not in _plan(checkout, "install")
    assert build not in _plan(checkout, "serve")
    source = checkout / "native" / crate / "src" / "lib.rs"
    later = (checkout / ".venv" / stamp).stat().st_mtime + 60
    os.utime(source, (later, later))
    assert build in _plan(checkout, "install")


def test_make_test_and_test_fast_run_the_type_checker(checkout: Path) -> None:
    _stamps(checkout, ".installed", ".installed-serve")
    for target in ("test", "test-fast", "typecheck"):
        assert "\n.venv/bin/mypy\n" in _plan(checkout, target), target


def test_make_test_fetches_the_jdbc_driver_analyze_looks_for(checkout: Path) -> None:
    from kgroups.pipeline.jdbc_driver import POSTGRESQL_JDBC_VERSION

    _stamps(checkout, ".installed", ".installed-serve")
    plan = _plan(checkout, "test")
    assert f"-Dartifact=org.postgresql:postgresql:{POSTGRESQL_JDBC_VERSION}" in plan
    assert f"postgresql-{POSTGRESQL_JDBC_VERSION}.jar" in plan
