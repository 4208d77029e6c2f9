"""Reference data for tests/audio from the silero-vad package (the peer), stored as JSON.

silero-vad needs torch, which cera does not use, so run this in a separate venv:

    python3 -m venv /work/venv-vadref
    /work/venv-vadref/bin/pip install torch==2.13.0          # the CPU build
    /work/venv-vadref/bin/pip install --no-deps silero-vad==6.2.3
    /work/venv-vadref/bin/pip install packaging onnxruntime numpy soundfile
    /work/venv-vadref/bin/python tests/audio/data/make_reference.py

It writes, beside this file:

- silero_clips.json: for each spoken clip, silero-vad's per-frame probabilities (its
  ONNX model through its own OnnxWrapper, onnxruntime, one thread) and the segments of
  ``get_speech_timestamps`` for each parameter set of vad_cases.CLIP_PARAMS;
- silero_segments.json: ``get_speech_timestamps`` on scripted per-frame probabilities
  (vad_cases.random_cases), to test the segment rules on many more situations. The
  probabilities are not stored: the tests make them again from the seed (Python's
  `random` is stable across versions) and check them against the stored SHA-256.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402
import soundfile  # noqa: E402
import torch  # noqa: E402
from silero_vad import __version__ as silero_version  # noqa: E402
from silero_vad import get_speech_timestamps, load_silero_vad  # noqa: E402
from vad_cases import CLIP_PARAMS, q_digest, random_cases, silero_segments  # noqa: E402

CLIPS = ["speech_16k.flac", "speech_8k.flac"]
RANDOM_SEED = 7
RANDOM_COUNT = 300


class Recording:
    """Wraps silero-vad's model to keep the probabilities get_speech_timestamps computes."""

    def __init__(self, model):
        self.model = model
        self.probs: list[float] = []

    def reset_states(self):
        self.probs = []
        self.model.reset_states()

    def __call__(self, chunk, sr):
        out = self.model(chunk, sr)
        self.probs.append(float(out.item()))
        return out


def clips() -> dict:
    model = Recording(load_silero_vad(onnx=True))
    doc = {"silero_vad": silero_version, "model": "silero_vad.onnx (OnnxWrapper)", "clips": {}}
    for name in CLIPS:
        data, rate = soundfile.read(str(HERE / name), dtype="float32")
        audio = torch.from_numpy(np.ascontiguousarray(data))
        entry = {"sample_rate": rate, "samples": len(data), "probs": None, "runs": []}
        for params in CLIP_PARAMS:
            segs = get_speech_timestamps(audio, model, sampling_rate=rate, **params)
            if entry["probs"] is None:
                entry["probs"] = model.probs
            assert model.probs == entry["probs"], "the model gave different probabilities on a second pass"
            entry["runs"].append({"params": params, "segments": [[int(s["start"]), int(s["end"])] for s in segs]})
        doc["clips"][name] = entry
        print(name, rate, len(data), [len(r["segments"]) for r in entry["runs"]])
    return doc


def scripted() -> dict:
    cases = random_cases(RANDOM_SEED, RANDOM_COUNT)
    for case in cases:
        probs = [v / 10000 for v in case["q"]]
        case["segments"] = silero_segments(probs, case["sample_rate"], case["length"], case["params"])
        case["q_sha256"] = q_digest(case.pop("q"))
    print("scripted cases:", len(cases), "segments:", sum(len(c["segments"]) for c in cases))
    return {"silero_vad": silero_version, "seed": RANDOM_SEED, "cases": cases}


def main() -> None:
    (HERE / "silero_clips.json").write_text(json.dumps(clips(), indent=1) + "\n")
    (HERE / "silero_segments.json").write_text(json.dumps(scripted(), separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
