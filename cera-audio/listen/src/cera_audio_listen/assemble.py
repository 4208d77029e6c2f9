"""The `cera.audio.AudioPipeline` of ``cera listen``, from the installed components.

- the wake word: a microWakeWord model of cera-audio-kws (a name such as ``okay-nabu``, a
  GGUF, or a .tflite with its .json), behind that distribution's Silero VAD gate and gain
  control (`cera_audio_kws.gated.HotwordIterator`, as ``cera kws`` runs it);
- the VAD: cera-audio-vad's default Silero model;
- the transcriber: a Whisper GGUF, or a bundled model of cera-audio-whisper (tiny.en by
  default);
- the diarizer, with ``diarize``: cera-audio-diarizer's default GE2E speaker diarizer.
"""

from __future__ import annotations

from cera.audio import AudioPipeline, PipelineParams, load_diarizer, load_transcriber, load_vad
from cera.errors import AudioError


def build_pipeline(wake: str | None = None, whisper: str | None = None, diarize: bool = False, speakers: int = 4,
                   params: PipelineParams | None = None, wait: bool = False, wake_threshold: float | None = None,
                   device: str = "auto", threads: int | None = None, quiet: bool = True) -> AudioPipeline:  # fmt: skip
    from cera_audio_vad.default import default_model_path as vad_path

    vad = load_vad(vad_path(quiet=quiet))
    kws = None
    if wake is not None:
        from cera_audio_kws.detector import load_hotword_detector
        from cera_audio_kws.gated import HotwordIterator

        kws = HotwordIterator(load_hotword_detector(wake, threshold=wake_threshold))
    transcriber = load_transcriber(whisper_path(whisper, quiet), device=device, threads=threads)
    diarizer = None
    if diarize:
        try:
            from cera_audio_diarizer.default import default_model_path as diarizer_path
        except ImportError:
            raise AudioError(
                "--diarize needs the speaker diarizer: pip install cera-audio-diarizer (or cera-audio-listen[diarize])"
            ) from None
        diarizer = load_diarizer(diarizer_path(quiet=quiet), device=device, threads=threads, max_speakers=speakers)
    return AudioPipeline(vad, transcriber, kws=kws, diarizer=diarizer, params=params, wait=wait)


def whisper_path(model: str | None, quiet: bool = True):
    """A Whisper GGUF: a bundled model by name (tiny.en, the default, or base) or a file."""
    from pathlib import Path

    from cera_audio_whisper.default import BUNDLES, model_path

    if model is None or model in BUNDLES:
        return model_path(model or "tiny.en", quiet=quiet)
    path = Path(model)
    if not path.is_file():
        raise AudioError(f"{model}: no such Whisper model file; give a GGUF from `cera convert whisper` or one of {', '.join(BUNDLES)}")
    return path
