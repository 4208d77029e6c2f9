"""The README's Python example, run as a newcomer runs it: it works, its outputs come on
lines of their own, a printed event or result is a line a person reads (not kilobytes of
token ids), and its tool loop answers a call instead of continuing a cut reply."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parents[2] / "README.md"


def python_example() -> str:
    text = README.read_text(encoding="utf-8")
    at = text.index("**From Python:**")
    m = re.compile(r"```python\n(.*?)```", re.S).search(text, at)
    return m.group(1)


def test_the_readme_python_example_prints_readable_lines(tmp_path):
    code = python_example()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert len(out) < 6000, f"{len(out)} characters printed"
    lines = out.splitlines()
    assert all(len(line) < 400 for line in lines), max(lines, key=len)[:200]
    # the streamed continuation ends its own line; each chat answer is a line of its own
    assert lines[0].strip() and not lines[0].startswith(("TurnResult", "TextDelta"))
    turn = next(line for line in lines if line.startswith("TurnResult("))
    assert "tool_calls=[get_weather(" in turn, turn  # the call is made, so the loop answers it
    assert sum(line.startswith("TurnEnd(") for line in lines) == 1
    assert any(line.startswith("EndEvent(") and "GenerationSummary(" in line for line in lines)
