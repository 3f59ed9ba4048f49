"""The README's commands work as written on what the README itself sets up: the files it names
ship with kgroups, and the groups it describes are the ones its examples create."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")


def _commands(program: str) -> list[list[str]]:
    """Each README line running `.venv/bin/kgroups <program>`, as its arguments (comments cut)."""
    prefix = f".venv/bin/kgroups {program} "
    return [shlex.split(line, comments=True)[1:] for line in README.splitlines()
            if line.startswith(prefix)]


def test_the_readmes_assign_command_runs_on_the_scenario_it_names() -> None:
    [command] = _commands("assign")
    scenario = Path(command[command.index("--input") + 1])
    assert (REPO / scenario).is_file(), f"{scenario} does not ship with kgroups"
    result = subprocess.run([sys.executable, "-m", "kgroups.cli", *command], cwd=REPO,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    # What the README says it shows: the newcomer gets nothing yet, each of the others gives
    # up one events partition first.
    assert answer["assignment"]["consumer-3"] == {}
    assert answer["revoked"] == {"consumer-1": {"events": [2]}, "consumer-2": {"events": [5]},
                                 "consumer-3": {}}
    assert answer["moved"] == 2


def test_the_readme_describes_only_groups_its_examples_create() -> None:
    created = set(re.findall(r"kcat .*-G (\S+)", README))
    named = [words[words.index("--group") + 1] for words in _commands("groups")
             if "--group" in words]
    assert created == {"my-group"} and named
    assert set(named) <= created, f"groups the README never creates: {set(named) - created}"
