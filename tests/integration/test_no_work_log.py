"""The tree speaks of the product alone: no work log in code, comments, READMEs, benchmark
text or tests. What a reader needs is a fact about the code (the measurement, its command,
its commit); changes go in each distribution's CHANGELOG.md. This scans every tracked text
file for the vocabulary of work accounts, so that the class of mistake stays fixed."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

# Trees that are being cleaned on their own line of work; each entry goes once it is.
PENDING = ()

_ORDINAL = r"(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|\d+(st|nd|rd|th))"

# (a word every match contains, pattern, what it catches); searched case-insensitively, line
# by line, in the files that contain the word (a substring test is far cheaper than a regex)
DENYLIST = [
    ("session", rf"\b{_ORDINAL} session\b", "a numbered work session"),
    (
        "session",
        r"\b(the|this|that|each|every|last|next|previous|earlier|later) session's (notes?|calls?|lab|table)\b",
        "a work session's account",
    ),
    ("device", r"\bdevice calls?\b", "a call of the device tool"),
    ("device", r"\bdevice tool\b", "the device tool"),
    ("device", r"/work/\.device\b", "the device tool's logs"),
    ("lent", r"\blent (H[12]00s?|GPUs?|machines?)\b", "a lent machine"),
    ("call", r"\bcall \d+ of the\b|\(call \d+\b|\bin call \d+\b", "a numbered device call"),
    ("wave", r"\bwave[- ]?\d+\b", "a wave of work"),
    ("issue", r"\bissues? #?\d+\b", "an issue number"),
    ("log", r"\bwork ?logs?\b", "a work log"),
    ("notes/", r"(^|[\s`'\"(])\.?notes/", "the notes folder"),
    ("h200_lab", r"\bh200_lab\b", "the lab script of a work session"),
]

# "helper" is also a word of code (a helper function, a C helper); in Markdown prose,
# unqualified, it names a person or an agent
_HELPER = re.compile(
    r"(?<!\bC )(?<!\bcffi )(?<!\bPython )(?<!\btest )(?<!\btemplate )(?<!\bshell )\bhelpers?\b"
    r"(?!\s+(functions?|modules?|scripts?|class(es)?|methods?|programs?|library|libraries|binar(y|ies))\b)",
    re.IGNORECASE,
)
_COMPILED = [(key, re.compile(p, re.IGNORECASE), why) for key, p, why in DENYLIST]
_TEXT_SUFFIXES = {
    ".py",
    ".md",
    ".txt",
    ".toml",
    ".cfg",
    ".ini",
    ".sh",
    ".c",
    ".h",
    ".inc",
    ".wgsl",
    ".yml",
    ".yaml",
    ".json",
    ".jinja",
    ".gbnf",
    ".lark",
    ".rst",
    "",
}


def _tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    return [f for f in out.stdout.decode().split("\0") if f]


def _prose(markdown: str) -> str:
    """Markdown without fenced blocks and inline code (line count kept)."""
    out, fenced = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", "``", line))
    return "\n".join(out)


def _findings(path: str, text: str) -> list[str]:
    found = []
    lowered = text.lower()
    rules = [(rx, why) for key, rx, why in _COMPILED if key in lowered]
    if rules:
        for n, line in enumerate(text.splitlines(), 1):
            for rx, why in rules:
                m = rx.search(line)
                if m:
                    found.append(f"{path}:{n}: {why}: {m.group(0)!r}")
    if path.endswith(".md") and "helper" in lowered:
        for n, line in enumerate(_prose(text).splitlines(), 1):
            m = _HELPER.search(line)
            if m:
                found.append(f"{path}:{n}: 'helper' in prose (a person or agent?): {line.strip()[:80]!r}")
    return found


def test_no_work_log_vocabulary_in_tracked_files():
    found = []
    for path in _tracked_files():
        if path == THIS or (PENDING and path.startswith(PENDING)) or Path(path).suffix not in _TEXT_SUFFIXES:
            continue
        file = ROOT / path
        if not file.is_file() or file.stat().st_size > 4_000_000:
            continue
        data = file.read_bytes()
        if b"\0" in data:
            continue
        found += _findings(path, data.decode("utf-8", errors="replace"))
    assert not found, "work-log vocabulary in the tree (state facts about the code instead):\n" + "\n".join(found)


def test_no_notes_folder():
    assert not [f for f in _tracked_files() if f.startswith(("notes/", ".notes/"))]


@pytest.mark.parametrize(
    "line",
    [
        "measured in the tenth session on the H200",
        "the 11th session's table",
        "Device call 4 of the session",
        "see the session's note",
        "(call 3, vulkan_dispatch_floor.py)",
        "## Wave 2: more families",
        "the reproductions of issue 12",
        "as the work log says",
        "details in notes/2026-12-02",
        "bash benchmarks/h200_lab.sh int8",
        "on the lent H200",
    ],
)
def test_denylist_catches(line):
    assert _findings("x.py", line)


@pytest.mark.parametrize(
    "line",
    [
        "a session keeps its state between calls",
        "another session of the same shape compiles nothing new",
        "cera's Session class",
        "each session gets its row",
        "one C call per token",
        "the second call used the cache",
        "tool_call 1",
    ],
)
def test_denylist_spares_product_words(line):
    assert not _findings("x.py", line)


def test_helper_only_in_markdown_prose():
    assert _findings("x.md", "the helper measured it")
    assert not _findings("x.md", "a small cffi C helper builds the pass")
    assert not _findings("x.md", "the template helper functions")
    assert not _findings("x.md", "`UNIT_HELPERS` holds the reads")
    assert not _findings("x.py", "# -- helpers --")
