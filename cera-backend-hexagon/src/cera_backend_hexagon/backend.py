"""The factory named by the `hexagon` BackendSpec: it refuses, naming the reason.

There is no hexagon implementation in this version. Constructing the backend raises
`cera.BackendUnavailable`, so an explicit `--device hexagon` fails clearly instead of
falling back to another device or pretending to compute.
"""

from __future__ import annotations

from cera.errors import BackendUnavailable

from .plugin import NOT_IMPLEMENTED


class HexagonBackend:
    name = "hexagon"

    def __init__(self, *args, **kwargs):
        raise BackendUnavailable(f"backend {self.name!r} is unavailable: {NOT_IMPLEMENTED}")
