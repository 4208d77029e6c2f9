"""No product source file is longer than a reader can hold in mind: every module of every
distribution's ``src`` stays within 1,000 lines. Data tables (generated, not read) are
exempt by name."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 1000
DATA_TABLES = {"cera-core/src/cera/text/tokenizer/_unicode_data.py"}
# Files over the limit that are allowed to stay so for now (none).
KNOWN_OVER_LIMIT: set[str] = set()


def product_sources() -> list[Path]:
    return sorted(p for p in ROOT.glob("**/src/**/*.py") if ".venv" not in p.parts and "tests" not in p.parts
                  and "build" not in p.parts)  # fmt: skip


def line_count(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def test_no_product_source_file_is_over_the_limit():
    files = product_sources()
    assert len(files) > 100  # the distributions were really found
    long = {str(p.relative_to(ROOT)): line_count(p) for p in files if line_count(p) > LIMIT}
    over = {f: n for f, n in long.items() if f not in DATA_TABLES | KNOWN_OVER_LIMIT}
    assert not over, f"split these by concept (at most {LIMIT} lines a file): {over}"


def test_the_exemptions_are_still_needed():
    """An exempt file that shrank (or moved) leaves the lists."""
    for name in DATA_TABLES | KNOWN_OVER_LIMIT:
        path = ROOT / name
        assert path.exists() and line_count(path) > LIMIT, f"{name} no longer needs its exemption: remove it"
