"""Stop strings: text held back while it could be the start of one, cut where one appears."""

from __future__ import annotations


class StopStrings:
    """Holds back text that could be the start of a stop string."""

    def __init__(self, stops: tuple[str, ...]):
        self.stops = [s for s in stops if s]
        self.held = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """Returns (text safe to emit, whether a stop string was hit)."""
        if not self.stops:
            return text, False
        self.held += text
        hits = [(self.held.find(s), s) for s in self.stops if s in self.held]
        if hits:
            at = min(h[0] for h in hits)
            out, self.held = self.held[:at], ""
            return out, True
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.held)), keep, -1):
                if self.held.endswith(s[:k]):
                    keep = k
                    break
        out = self.held[: len(self.held) - keep]
        self.held = self.held[len(self.held) - keep :]
        return out, False

    def flush(self) -> str:
        out, self.held = self.held, ""
        return out


__all__ = ["StopStrings"]
