"""`pip install kgroups` without extras gives the broker, the assignors and the command line;
`kgroups analyze` there says how to add the spark extra instead of failing on an import."""

from __future__ import annotations

import json
import selectors
import shutil
import signal
import subprocess
import time
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SPARK_ONLY = ("pyspark", "pandas", "pyarrow", "matplotlib")


@pytest.fixture(scope="module")
def plain_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with `pip install .` (no extras), from a copy of the sources so that the
    build leaves nothing in the work tree."""
    root = tmp_path_factory.mktemp("plain")
    source = root / "src-copy"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".venv", ".git", "*.egg-info", "build", "__pycache__", ".pytest_cache", "kgroups-data",
        ".hypothesis"))
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=True)
    subprocess.run([env_dir / "bin" / "python", "-m", "pip", "install", "--quiet", str(source)],
                   check=True, timeout=600)
    return env_dir / "bin"


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
