"""`kgroups assign`: the issue's JSON shapes in and out, one clear line and exit 1 on bad input."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from kgroups.cli import main

SCENARIO = {
    "topics": {"t1": 3, "t2": {"partitions": 2, "racks": [["a", "b"], ["c"]]}},
    "members": {
        "c1": {
            "topics": ["t1", "t2"],
            "owned": {"t1": [0]},
            "generation": 4,
            "rack": "a",
            "instance_id": "i-1",
        },
        "c2": {"topics": ["t1"], "owned": {"t1": [1, 2]}, "generation": 4},
    },
}


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], scenario: object, *extra: str):
    path = tmp_path / "scenario.json"
    path.write_text(scenario if isinstance(scenario, str) else json.dumps(scenario))
    code = main(["assign", "--input", str(path), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_prints_every_member_with_sorted_partitions(tmp_path, capsys) -> None:
    code, out, _ = _run(tmp_path, capsys, SCENARIO, "--strategy", "range")
    assert code == 0
    assert json.loads(out) == {
        "assignment": {"c1": {"t1": [0, 1], "t2": [0, 1]}, "c2": {"t1": [2]}}
    }


def test_cooperative_output_lists_revocations(tmp_path, capsys) -> None:
    scenario = json.loads(json.dumps(SCENARIO))
    scenario["members"]["c1"]["owned"] = {"t1": [0, 1, 2], "t2": [0, 1]}
    scenario["members"]["c2"] = {"topics": ["t1"]}
    code, out, _ = _run(tmp_path, capsys, scenario, "--strategy", "cooperative-sticky")
    assert code == 0
    # Kafka 4.3.1's answer too: c1's rack holds no replica of t1 (the scenario names none), so
    # c1 gives t1 up for c2, which names no rack; it is revoked this round, assigned the next.
    assert json.loads(out) == {
        "assignment": {"c1": {"t2": [0, 1]}, "c2": {}},
        "revoked": {"c1": {"t1": [0, 1, 2]}, "c2": {}},
    }


def test_compare_adds_balance_and_moves(tmp_path, capsys) -> None:
    code, out, _ = _run(tmp_path, capsys, SCENARIO, "--strategy", "roundrobin", "--compare")
    result = json.loads(out)
    assert code == 0
    # roundrobin ignores history: c1 (first, static) takes t1-0, c2 t1-1, c1 t1-2, then t2.
    assert result["assignment"] == {"c1": {"t1": [0, 2], "t2": [0, 1]}, "c2": {"t1": [1]}}
    assert result["balance"] == {"min": 1, "max": 4}
    assert result["moved"] == 1  # c2 lost t1-2


@pytest.mark.parametrize(
    ("scenario", "strategy", "message"),
    [
        (SCENARIO, "fastest", "unknown assignment strategy 'fastest'"),
        ("{not json", "range", "is not valid JSON"),
        ({"topics": {"t1": 1}, "members": {"c": {"topics": ["nope"]}}}, "sticky", "no known topic"),
        ({"topics": {"t1": -1}, "members": {"c": {"topics": ["t1"]}}}, "range", "partitions must"),
        ({"topics": {"t1": 2**31}, "members": {"c": {"topics": ["t1"]}}}, "range", "from 0 to"),
        ({"topics": {"t1": 1}, "members": {}}, "range", '"members" must be'),
        ({"topics": {"t1": 1}, "members": {"c": {"topics": "t1"}}}, "range", "list of topic"),
        (
            {"topics": {"t1": 1}, "members": {"c": {"topics": ["t1"], "owned": {"t1": "0"}}}},
            "sticky",
            "owned must map",
        ),
        ({"topics": {"t1": {"partitions": 2, "racks": [["a"]]}}, "members": {}}, "range", "racks"),
        (
            {"topics": {"t1": 1}, "members": {"c": {"topics": ["t1"], "owned": {"t1": [2**31]}}}},
            "sticky",
            "owned partition numbers must be 32-bit integers",
        ),
        (
            {"topics": {"t1": 1}, "members": {"c": {"topics": ["t1"], "generation": 2**31}}},
            "cooperative-sticky",
            "generation must be a 32-bit integer",
        ),
        (
            {
                "topics": {"t1": 1},
                "members": {
                    "a": {"topics": ["t1"]},
                    "b": {"topics": ["t1"], "generation": "4"},
                    "c": {"topics": "t1"},
                },
            },
            "range",
            "member 'b': generation must be an integer",
        ),
        ([1, 2], "range", "must be a JSON object"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(tmp_path, capsys, scenario, strategy, message) -> None:
    code, out, err = _run(tmp_path, capsys, scenario, "--strategy", strategy)
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1
    assert message in err


def test_missing_file_is_one_line_and_exit_1(tmp_path, capsys) -> None:
    code = main(["assign", "--strategy", "range", "--input", str(tmp_path / "absent.json")])
    assert code == 1
    assert "cannot read" in capsys.readouterr().err


def test_reads_the_scenario_from_stdin(capsys, monkeypatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(SCENARIO)))
    assert main(["assign", "--strategy", "sticky", "--input", "-"]) == 0
    assert set(json.loads(capsys.readouterr().out)["assignment"]) == {"c1", "c2"}
