"""The wake-word protocol the `AudioPipeline` drives.

Any object with ``sample_rate``, ``push(pcm) -> detections`` (chunks of any size, mono
float32 at that rate; each detection has ``time`` in seconds from the first sample pushed
since ``reset()``, ``probability``, and its wake word as ``label`` or ``wake_word``) and
``reset()`` is a wake-word detector here; keyword-spotting plugins (``kind="kws"``)
provide them, and tests use small deterministic ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..errors import AudioError


@runtime_checkable
class WakeWordDetector(Protocol):
    sample_rate: int

    def push(self, pcm) -> Sequence[Any]: ...

    def reset(self) -> None: ...


def detection_label(d) -> str:
    """The wake word of a detection (its ``label``, else its ``wake_word``)."""
    label = getattr(d, "label", None)
    if label is None:
        label = getattr(d, "wake_word", None)
    if not isinstance(label, str):
        raise AudioError(f"a wake-word detection {d!r:.80} has no label (neither 'label' nor 'wake_word')")
    return label


def check_detector(detector) -> None:
    missing = [name for name in ("sample_rate", "push", "reset") if not hasattr(detector, name)]
    if missing:
        raise AudioError(f"{type(detector).__name__} is not a wake-word detector: it lacks {', '.join(missing)}")
