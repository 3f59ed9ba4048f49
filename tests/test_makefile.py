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


NATIVE_STICKY_BUILD = "/bin/python -m pip install --quiet ./native/sticky_assign\n"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(REPO / name, tmp_path / name)
    # The compiled sticky steps' sources, which the Makefile names as prerequisites (copied
    # now, so older than the stamps `_stamps` makes).
    shutil.copytree(REPO / "native" / "sticky_assign", tmp_path / "native" / "sticky_assign",
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


def test_make_install_builds_the_compiled_sticky_steps_and_again_when_they_change(
    checkout: Path,
) -> None:
    _stamps(checkout, ".installed", ".installed-serve")
    assert NATIVE_STICKY_BUILD in _plan(checkout, "install")
    assert NATIVE_STICKY_BUILD not in _plan(checkout, "serve")
    _stamps(checkout, ".installed", ".installed-serve", ".installed-sticky-assign")
    assert NATIVE_STICKY_BUILD not in _plan(checkout, "install")
    source = checkout / "native" / "sticky_assign" / "src" / "lib.rs"
    later = (checkout / ".venv" / ".installed-sticky-assign").stat().st_mtime + 60
    os.utime(source, (later, later))
    assert NATIVE_STICKY_BUILD in _plan(checkout, "install")


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
