"""Backends that are registered but not implemented yet, done once for all of them.

A placeholder distribution (none of the first-party backends is one now) registers its
backend name before the backend runs, so users see it in `cera plugins` and `cera inspect`, with the honest reason it cannot run.
It declares no tensor types and no ops, so admission never picks it, and its factory
raises `BackendUnavailable` with that same reason: an explicit ``--device`` fails
clearly instead of falling back to another device or pretending to compute.

Cheap to import (the plugin modules use it): nothing but cera's declarations.
"""

from __future__ import annotations

from ..errors import BackendUnavailable
from .registry import BackendSpec


def not_implemented(distribution: str) -> str:
    return (
        f"not implemented in this version of {distribution}; "
        "choose another backend (`cera plugins` lists the usable ones)"
    )


def placeholder_spec(name: str, distribution: str, factory: str, priority: int, description: str) -> BackendSpec:
    """The registration of a not-yet-implemented backend."""
    reason = not_implemented(distribution)
    return BackendSpec(
        name=name,
        factory=factory,
        tensor_types=(),
        ops=(),
        priority=priority,  # above the CPU: once it works, a usable accelerator wins under --device auto
        description=f"{description} (not implemented yet)",
        available=lambda: reason,
        placeholder=True,
    )


class PlaceholderBackend:
    """The factory of a placeholder: constructing it refuses, naming the reason."""

    name = "?"
    distribution = "?"

    def __init__(self, *args, **kwargs):
        raise BackendUnavailable(f"backend {self.name!r} is unavailable: {not_implemented(self.distribution)}")
