"""Audio components: what every one of them is, and how one is loaded from a GGUF file.

An audio component (voice activity detector, keyword spotter, transcriber, diarizer) is
a model that consumes mono float32 PCM at one of a few fixed sample rates, keeps state
between the chunks it is given, and can be reset. A plugin registers it with
``cera_register_audio`` as a `cera.AudioComponent` naming its ``kind``, the GGUF
``general.architecture`` strings it serves and a ``"module:attr"`` factory; the factory is a
subclass of `StreamingAudioComponent` and is imported only when a file of that
architecture is opened.
"""

from __future__ import annotations

import abc
import os
from typing import Any

from ..errors import AudioError
from ..plugins.registry import AudioComponent, load_factory


class StreamingAudioComponent(abc.ABC):
    """Base of every audio component: fixed sample rate, streaming state, reset.

    Subclasses set ``sample_rates`` (every rate the model file serves) and
    ``sample_rate`` (the rate this instance runs at), and implement `from_gguf`.
    """

    kind: str = ""
    sample_rates: tuple[int, ...] = ()
    sample_rate: int = 0

    @classmethod
    @abc.abstractmethod
    def from_gguf(cls, gguf, sample_rate: int | None = None, **options: Any) -> StreamingAudioComponent:
        """Build the component from an open `cera.formats.gguf.GGUFFile` (None: the file's first rate)."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Forget everything heard so far: the next sample starts a new stream."""


def _registered(kind: str, manager=None) -> list[AudioComponent]:
    if manager is None:
        from ..plugins.manager import get_manager

        manager = get_manager()
    return manager.audio_components(kind)


def component_for(architecture: str, kind: str, path: str | os.PathLike = "", manager=None) -> AudioComponent:
    """The registered component of ``kind`` that serves ``architecture``, or an error naming both."""
    components = _registered(kind, manager)
    for comp in components:
        if architecture in comp.architectures:
            return comp
    served = sorted({a for c in components for a in c.architectures})
    where = f"{path}: " if path else ""
    if served:
        hint = f"the installed {kind} components serve: {', '.join(served)}"
    else:
        package = {"vad": "cera-audio-vad", "kws": "cera-audio-kws", "transcriber": "cera-audio-whisper", "diarizer": "cera-audio-diarizer"}.get(kind, "cera-audio")
        hint = f"no {kind} component is installed (`pip install {package}`)"
    raise AudioError(
        f"{where}GGUF architecture {architecture!r} is not a {_KIND_NAMES.get(kind, kind)} model; {hint}"
    )


_KIND_NAMES = {
    "vad": "voice activity detection",
    "kws": "keyword spotting",
    "transcriber": "speech transcription",
    "diarizer": "speaker diarization",
}


def load_component(
    path: str | os.PathLike, kind: str, sample_rate: int | None = None, manager=None, **options: Any
) -> StreamingAudioComponent:
    """Open a GGUF file and build the registered component of ``kind`` for its architecture."""
    from ..formats.gguf import GGUFFile

    # Components copy what they need out of the file (into the layout they compute in), so
    # the map is closed again here; views a component keeps hold it open until collected.
    with GGUFFile(path) as gguf:
        comp = component_for(gguf.architecture, kind, path, manager)
        cls = load_factory(comp.factory)
        return cls.from_gguf(gguf, sample_rate=sample_rate, **options)
