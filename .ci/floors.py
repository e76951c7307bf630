"""Print the lowest versions pyproject.toml allows, one ``name==version`` per line.

Used as a pip constraints file: CI installs the package with its runtime dependencies and
every extra but ``dev`` pinned at their floors (the test tools resolve as usual), and runs
the suite on them, so a floor that no longer works fails CI instead of a user's install.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

TOOLS = "dev"  # the test and lint tools: resolved as usual, not pinned
_FLOOR = re.compile(r"^\s*([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)")


def floors(pyproject: Path) -> list[str]:
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    wanted = [*project["dependencies"]]
    for extra, requirements in project["optional-dependencies"].items():
        if extra != TOOLS:
            wanted += requirements
    pins = []
    for requirement in wanted:
        match = _FLOOR.match(requirement)
        if match is None:
            raise SystemExit(f"{requirement!r}: every runtime dependency needs a >= floor")
        pins.append(f"{match[1]}=={match[2]}")
    return pins


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1]
    print("\n".join(floors(root / "pyproject.toml")))
