"""Make resemblyzer's stored outputs that the diarizer tests compare against.

Run from the repository root after make_conversations.py, in an environment with the
peer installed (`pip install resemblyzer==0.1.4 "setuptools<81"`; it brings torch and
librosa; webrtcvad, which it imports, needs setuptools' pkg_resources):

    python tests/audio_diarizer/data/make_reference.py

Writes ``reference.npz`` beside this script:
- ``mel_filters``: ``librosa.filters.mel(sr=16000, n_fft=400, n_mels=40)``;
- ``mel``: resemblyzer's ``wav_to_mel_spectrogram`` of the first 3 s of two_voices.flac;
- ``partials_mel`` / ``partials_embed``: 5 random partial utterances (mel power frames,
  seed 0) and ``VoiceEncoder.forward`` on them;
- ``<conversation>/turn<k>``: ``VoiceEncoder.embed_utterance`` of each reference turn's
  audio (cut at the RTTM's boundaries, volume raised to -30 dBFS as resemblyzer's
  ``normalize_volume(..., increase_only=True)`` does, no silence trimming).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf

HERE = Path(__file__).resolve().parent
CONVERSATIONS = ("two_voices", "three_voices", "two_voices_long_turns")


def turns(name: str) -> list[tuple[float, float, str]]:
    out = []
    for line in (HERE / f"{name}.rttm").read_text().splitlines():
        f = line.split()
        out.append((float(f[3]), float(f[3]) + float(f[4]), f[7]))
    return out


def main() -> None:
    import librosa
    import torch
    from resemblyzer import VoiceEncoder
    from resemblyzer.audio import normalize_volume, wav_to_mel_spectrogram

    torch.set_num_threads(1)
    enc = VoiceEncoder("cpu", verbose=False)
    arrays = {"mel_filters": librosa.filters.mel(sr=16000, n_fft=400, n_mels=40).astype(np.float32)}
    wav, sr = sf.read(HERE / "two_voices.flac", dtype="float32")
    assert sr == 16000
    arrays["mel"] = wav_to_mel_spectrogram(wav[: 3 * sr])
    rng = np.random.default_rng(0)
    mels = (rng.gamma(0.5, 2.0, size=(5, 160, 40)) * 10 ** rng.uniform(-4, 0, size=(5, 1, 1))).astype(np.float32)
    with torch.no_grad():
        arrays["partials_embed"] = enc(torch.from_numpy(mels)).numpy()
    arrays["partials_mel"] = mels
    for name in CONVERSATIONS:
        wav, sr = sf.read(HERE / f"{name}.flac", dtype="float32")
        for k, (a, b, _) in enumerate(turns(name)):
            piece = normalize_volume(wav[int(round(a * sr)) : int(round(b * sr))], -30, increase_only=True)
            arrays[f"{name}/turn{k}"] = enc.embed_utterance(piece.astype(np.float32))
    np.savez_compressed(HERE / "reference.npz", **arrays)
    print(HERE / "reference.npz", len(arrays), "arrays")


if __name__ == "__main__":
    main()
