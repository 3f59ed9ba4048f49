"""`kgroups simulate` as a user runs it: the table, JSON, the picture, and one-line errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kgroups.cli import main

SCENARIO = """\
name: one-restart
duration_s: 240
topics: {orders: 8}
members: 4
measure_from_s: 30
events:
  - {at_s: 60, action: restart, members: [m1], down_s: 10}
variants:
  - {name: eager, protocol: eager, assignor: range}
  - {name: coop-static, protocol: cooperative, static: true}
"""


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["simulate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_scenario_file_gives_one_row_per_variant(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    code, out, _ = _run(capsys, "--scenario", str(path))
    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines()[3:]}
    assert set(rows) == {"eager", "coop-static"}
    assert int(rows["eager"][1]) > 0  # the restart rebalances an eager dynamic group
    assert int(rows["coop-static"][1]) == 0  # and not a static one


def test_json_output_and_variants_from_the_command_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "--template", "zone-outage", "--members", "6", "--output",
                        "json", "--variant", "protocol=consumer",
                        "--variant", "name=coop,protocol=cooperative")
    assert code == 0
    report = json.loads(out)
    assert [v["variant"] for v in report["variants"]] == ["consumer-uniform", "coop"]
    for variant in report["variants"]:
        assert variant["unowned_partition_seconds"] > 0  # a third of the group crashed
        assert variant["most_owners_at_once"] == 1


@pytest.mark.parametrize(("text", "line", "words"), [
    (SCENARIO.replace("action: restart", "action: explode"), 7, "unknown action 'explode'"),
    (SCENARIO.replace("members: 4", "memberz: 4"), 4, "unknown scenario key 'memberz'"),
    (SCENARIO.replace("[m1]", "[m9]"), 7, "no member named 'm9'"),
    (SCENARIO.replace("{orders: 8}", "{orders: 8"), 4, "not valid YAML or JSON"),
    ('{"duration_s": 10,\n "topics": {"t": -1}}', 2, "partition count"),
])
def test_a_bad_scenario_file_is_one_line_naming_the_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, line: int,
        words: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, out, err = _run(capsys, "--scenario", str(path))
    assert code != 0
    assert out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"line {line}:" in err and words in err


def test_a_missing_file_and_a_bad_variant_are_one_line_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "--scenario", str(tmp_path / "absent.yaml"))
    assert code != 0 and err.count("\n") == 1 and "cannot read" in err
    code, _, err = _run(capsys, "--template", "rolling-restart", "--variant", "protocol=magic")
    assert code != 0 and err.count("\n") == 1 and "protocol must be one of" in err


def test_help_shows_a_scenario_file(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    out = capsys.readouterr().out
    assert "duration_s:" in out and "action: restart" in out


def test_the_timeline_is_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    picture = tmp_path / "t.png"
    code, _, _ = _run(capsys, "--template", "flapping-member", "--members", "3",
                      "--partitions", "6", "--timeline", str(picture))
    assert code == 0
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_matplotlib_the_timeline_says_what_to_install(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    picture = tmp_path / "t.png"
    code, out, err = _run(capsys, "--template", "flapping-member", "--members", "3",
                          "--partitions", "6", "--timeline", str(picture))
    assert code == 1 and "flapping-member" in out  # the table is printed all the same
    assert err == ("kgroups simulate: the timeline needs matplotlib: pip install "
                   "'kgroups[simulate]'\n")
    assert not picture.exists()
