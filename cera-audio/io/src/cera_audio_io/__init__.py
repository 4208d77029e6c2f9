"""Audio files for cera's audio components: `read_audio` reads a whole file as mono float32
PCM at the rate a component needs (libsndfile decodes, libsoxr resamples); `open_audio`
does the same in blocks, in memory that does not grow with the file; `read_raw_pcm` reads
raw 16-bit PCM from a pipe.

A library, not a plugin: it registers nothing. Audio components and commands that take
files depend on it; the core does not (its `cera.audio` is the interfaces and PCM checks).
"""

from __future__ import annotations

from .files import AudioClip, AudioInfo, AudioStream, choose_rate, open_audio, read_audio, resample
from .raw import read_raw_pcm

__all__ = ["AudioClip", "AudioInfo", "AudioStream", "choose_rate", "open_audio", "read_audio", "read_raw_pcm", "resample"]
