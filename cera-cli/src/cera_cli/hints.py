"""Hints as a command shows them: a reason written for anywhere ("... (`cera plugins` lists
the usable ones)") loses the part that sends the reader to the very command that printed it."""

from __future__ import annotations

import re


def without_pointer(text: str, command: str) -> str:
    """``text`` less the parentheses, and the clauses after a ';' or ':', that name
    ``command`` in backquotes (`cera plugins`)."""
    if not text:
        return text
    tick = re.escape(f"`{command}`")
    text = re.sub(rf"\s*\([^()]*{tick}[^()]*\)", "", text)
    text = re.sub(rf"[;:,]\s*[^;:]*{tick}[^;]*", "", text)
    text = re.sub(rf"\s*{tick}", "", text)
    return text.strip()
