"""The wheel `make wheel` builds, installed without extras into a fresh venv (as a project that
tests its consumers with kgroups installs it): it gives the broker, the assignors, the command
line and the pytest plugin; `kgroups analyze` there says how to add the spark extra instead of
failing on an import."""

from __future__ import annotations

import json
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SPARK_ONLY = ("pyspark", "pandas", "pyarrow", "matplotlib")


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`make wheel` in a copy of the sources (the build leaves nothing in the work tree): the
    wheel and what make printed."""
    source = tmp_path_factory.mktemp("wheel") / "src-copy"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".venv", ".git", "*.egg-info", "build", "dist", "__pycache__", ".pytest_cache",
        "kgroups-data", ".hypothesis", ".ruff_cache"))
    made = subprocess.run(["make", "-C", str(source), "wheel", f"PYTHON={sys.executable}"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert made.returncode == 0, made.stdout + made.stderr
    [wheel] = (source / "dist").glob("kgroups-*.whl")
    return wheel, made.stdout + made.stderr


@pytest.fixture(scope="module")
def plain_install(tmp_path_factory: pytest.TempPathFactory, built_wheel: tuple[Path, str]) -> Path:
    """A fresh venv with the wheel (no extras) and pytest, at the version the test extra pins."""
    test_extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["test"]
    [pytest_pin] = [pin for pin in test_extra if pin.startswith("pytest==")]
    env_dir = tmp_path_factory.mktemp("plain") / "venv"
    venv.create(env_dir, with_pip=True)
    subprocess.run([env_dir / "bin" / "python", "-m", "pip", "install", "--quiet",
                    str(built_wheel[0]), pytest_pin], check=True, timeout=600)
    return env_dir / "bin"


@pytest.mark.slow
def test_make_wheel_builds_a_wheel_without_warnings(built_wheel: tuple[Path, str]) -> None:
    """Setuptools used to print its `project.license` deprecation (three times per install)."""
    wheel, output = built_wheel
    assert re.fullmatch(r"kgroups-[0-9.]+-py3-none-any\.whl", wheel.name)
    assert not re.search(r"(?i)warning|deprecat", output), output


@pytest.mark.slow
def test_the_wheels_pytest_plugin_gives_a_project_the_kafka_broker_fixture(
    plain_install: Path, tmp_path: Path,
) -> None:
    """A project with no conftest.py: the fixture can only come from the installed wheel's
    entry point; its broker answers, and the run is clean under `-W error`."""
    (tmp_path / "test_uses_fixture.py").write_text(
        "import socket\n\n\n"
        "def test_broker_listens(kafka_broker):\n"
        "    socket.create_connection((kafka_broker.host, kafka_broker.port), 10).close()\n")
    result = subprocess.run([plain_install / "python", "-m", "pytest", "-q", "-W", "error",
                             "-p", "no:cacheprovider"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


@pytest.mark.slow
def test_plain_install_has_no_spark_dependencies(plain_install: Path) -> None:
    probe = (f"import importlib.util as u, json; "
             f"print(json.dumps([m for m in {SPARK_ONLY!r} if u.find_spec(m)]))")
    found = subprocess.run([plain_install / "python", "-c", probe], capture_output=True,
                           text=True, check=True).stdout
    assert json.loads(found) == []


@pytest.mark.slow
def test_plain_install_serves_and_assigns(plain_install: Path, tmp_path: Path) -> None:
    server = subprocess.Popen([plain_install / "kgroups", "serve", "--host", "127.0.0.1",
                               "--port", "0", "--data-dir", str(tmp_path / "data")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert server.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(server.stdout, selectors.EVENT_READ)
            assert selector.select(timeout=60), "kgroups serve printed nothing"
            line = server.stdout.readline().decode()
        assert line.startswith("listening 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        listed = subprocess.run([plain_install / "kgroups", "groups", "list",
                                 "--bootstrap-server", f"127.0.0.1:{port}"],
                                capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"topics": {"t": 4}, "members": {
        "a": {"topics": ["t"]}, "b": {"topics": ["t"]}}}))
    assigned = subprocess.run([plain_install / "kgroups", "assign", "--strategy", "range",
                               "--input", str(scenario)], capture_output=True, text=True,
                              timeout=60)
    assert assigned.returncode == 0, assigned.stderr
    assert json.loads(assigned.stdout) == {"assignment": {"a": {"t": [0, 1]}, "b": {"t": [2, 3]}}}


@pytest.mark.slow
def test_analyze_without_the_spark_extra_says_how_to_install_it(
    plain_install: Path, tmp_path: Path,
) -> None:
    started = time.monotonic()
    result = subprocess.run([plain_install / "kgroups", "analyze", str(tmp_path),
                             "--out", str(tmp_path / "out")], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "kgroups analyze needs the spark extra (missing: pyspark, pandas, pyarrow, matplotlib); "
        "install it with: pip install 'kgroups[spark]'"]
    assert "Traceback" not in result.stderr and time.monotonic() - started < 30


@pytest.mark.slow
def test_simulate_runs_without_extras_and_from_history_says_what_it_needs(
    plain_install: Path, tmp_path: Path,
) -> None:
    """A broker-only install simulates a template (the table needs nothing more); replaying a
    history needs the pipeline, which says so in one line."""
    table = subprocess.run([plain_install / "kgroups", "simulate", "--template",
                            "rolling-restart", "--members", "3", "--partitions", "6"],
                           capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    assert "cooperative-sticky" in table.stdout
    history = subprocess.run([plain_install / "kgroups", "simulate", "--from-history",
                              str(tmp_path), "--group", "g"], capture_output=True, text=True,
                             timeout=60)
    assert history.returncode == 1
    assert history.stderr.strip().splitlines() == [
        "kgroups simulate: --from-history reads the history with the pipeline, which needs the "
        "spark extra: pip install 'kgroups[spark]'"]
