"""The README's test command is what CI runs: `.ci/run`'s pytest command, and every system
package `.ci/run` installs first is named in the README beside it (the one extra step)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_the_readme_says_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("Run the tests") : readme.index("## A tour")]
    command = next(line for line in ci.splitlines() if line.startswith("python3 -m venv"))
    assert f"\n{command}\n" in section, "the README's test command differs from .ci/run's"
    packages = set()
    for m in re.finditer(r"apt-get install ([^)>&|]*)", ci):
        packages |= {w for w in m.group(1).split() if not w.startswith("-")}
    assert packages, ".ci/run installs no system package: this test reads it wrongly"
    missing = sorted(p for p in packages if p not in section)
    assert not missing, f"the README's test section does not name {missing}, which .ci/run installs"
