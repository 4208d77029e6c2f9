"""Make the keyword-spotting tests' audio and the peers' outputs on it.

Run from the repository root, with espeak-ng on the PATH and the peers installed
(`pip install pymicro-features==2.0.2 pymicro-wakeword==2.5.0 ai-edge-litert==2.3.0`):

    python tests/audio_kws/data/make_reference.py

Writes, beside this script:
- ``<clip>.flac``: 16 kHz 16-bit mono clips synthesized by espeak-ng (voice, speed and
  text in CLIPS below), each with 0.5 s of silence on both sides;
- ``reference.npz``: per clip, pymicro-features' features (the uint16 integers:
  features / 0.0390625) and per model the network's raw uint8 output per step, from
  ai-edge-litert's reference kernels (BUILTIN_REF) on those features quantized as
  pymicro-wakeword quantizes them;
- ``reference.json``: per clip and model, whether pymicro-wakeword (its own front end and
  TensorFlow Lite library) detects the wake word, and its largest sliding mean.
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

HERE = Path(__file__).resolve().parent
MODELS = ("okay_nabu", "hey_jarvis", "hey_mycroft", "alexa")
# name -> (text, espeak-ng voice, words per minute)
CLIPS = {
    "okay_nabu_en-us_160": ("okay nabu", "en-us", 160),
    "hey_jarvis_en-us+f3_160": ("hey jarvis", "en-us+f3", 160),
    "hey_mycroft_en_160": ("hey mycroft", "en", 160),
    "alexa_en-gb-x-rp_160": ("alexa", "en-gb-x-rp", 160),
    "negative_weather": ("what is the weather like today", "en-us", 160),
    "negative_near_miss": ("okay google, hey travis, hey microsoft", "en", 160),
}


def synthesize(text: str, voice: str, speed: int) -> np.ndarray:
    wav = subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "--stdout", text],
                         capture_output=True, check=True).stdout
    x, sr = sf.read(io.BytesIO(wav), dtype="float32")
    x = soxr.resample(x, sr, 16000).astype(np.float32)
    pad = np.zeros(8000, dtype=np.float32)
    return np.clip(np.round(np.concatenate([pad, x, pad]) * 32768), -32768, 32767).astype(np.int16)


def reference_features(pcm: np.ndarray) -> np.ndarray:
    from pymicro_features import MicroFrontend

    fe = MicroFrontend()
    out = []
    for i in range(0, len(pcm) - 159, 160):
        r = fe.process_samples(pcm[i : i + 160].tobytes())
        if r.features:
            out.append(r.features)
    return np.round(np.array(out, dtype=np.float64) / 0.0390625).astype(np.uint16)


def reference_steps(model_path: Path, features: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(str(model_path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF, num_threads=1)
    it.allocate_tensors()
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    scale, zp = inp["quantization"]
    f = features.astype(np.float64) * 0.0390625
    steps = []
    for k in range(0, len(f) - 2, 3):
        q = np.round(f[k : k + 3] / scale + zp).astype(np.int8)
        it.set_tensor(inp["index"], q[None])
        it.invoke()
        steps.append(int(it.get_tensor(out["index"]).reshape(-1)[0]))
    return np.array(steps, dtype=np.uint8)


def reference_detection(model: str, pcm: np.ndarray) -> tuple[bool, float]:
    from pymicro_wakeword import MicroWakeWord, MicroWakeWordFeatures, Model

    mww = MicroWakeWord.from_builtin(Model(model))
    feats = MicroWakeWordFeatures()
    best, hit = 0.0, False
    for f in feats.process_streaming(pcm.astype("<i2").tobytes()):
        p = mww.process_streaming_prob(f)
        best = max(best, p)
        hit = hit or p > mww.probability_cutoff
    return hit, best


def main() -> None:
    import pymicro_wakeword

    models_dir = Path(pymicro_wakeword.__file__).parent / "models"
    arrays, doc = {}, {"clips": {}}
    for name, (text, voice, speed) in CLIPS.items():
        pcm = synthesize(text, voice, speed)
        sf.write(HERE / f"{name}.flac", pcm, 16000, subtype="PCM_16")
        feats = reference_features(pcm)
        arrays[f"{name}/features"] = feats
        entry = {"text": text, "voice": voice, "speed": speed, "samples": len(pcm), "models": {}}
        for model in MODELS:
            arrays[f"{name}/{model}"] = reference_steps(models_dir / f"{model}.tflite", feats)
            hit, best = reference_detection(model, pcm)
            entry["models"][model] = {"detected": hit, "max_mean": round(best, 6)}
        doc["clips"][name] = entry
        print(name, {m: v["detected"] for m, v in entry["models"].items()})
    np.savez_compressed(HERE / "reference.npz", **arrays)
    (HERE / "reference.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
