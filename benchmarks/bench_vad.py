"""Silero VAD: real-time factor of cera and of onnxruntime on the same audio, one thread each.

    python benchmarks/bench_vad.py [--audio FILE] [--seconds 60] [--rate 16000] [--repeat 5]

Both run the same network (cera from the GGUF converted from silero_vad.onnx, onnxruntime
from that ONNX file) over the same PCM, frame by frame with state carried, in one process,
alternating, and the best of ``--repeat`` runs is kept for each. The onnxruntime side is
driven the way silero-vad's own wrapper drives it (one session.run per frame, the previous
input's tail prepended). cera is measured twice: offline (`probabilities`, the batched path
a file takes) and streaming (`process_frame`, one call per frame, the worst case for Python
overhead). Real-time factor = processing time / audio duration (smaller is faster).

Without --audio the spoken test clip (tests/audio/data) is repeated to --seconds.
"""

from __future__ import annotations

import os

# One thread for both sides: BLAS (cera's numpy) and onnxruntime's intra-op pool.
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import argparse  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_AUDIO = ROOT / "tests" / "audio" / "data" / "speech_16k.flac"


def ort_runner(onnx_path: str, sample_rate: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    session = ort.InferenceSession(onnx_path, sess_options=opts, providers=["CPUExecutionProvider"])
    frame = 512 if sample_rate == 16000 else 256
    context = 64 if sample_rate == 16000 else 32
    sr = np.array(sample_rate, dtype=np.int64)

    def run(x: np.ndarray) -> np.ndarray:
        n = len(x) // frame
        state = np.zeros((2, 1, 128), dtype=np.float32)
        inp = np.zeros((1, context + frame), dtype=np.float32)
        out = np.empty(n, dtype=np.float32)
        for i in range(n):
            inp[0, :context] = inp[0, frame:]  # the previous input's tail
            inp[0, context:] = x[i * frame : (i + 1) * frame]
            prob, state = session.run(None, {"input": inp, "state": state, "sr": sr})
            out[i] = prob[0, 0]
        return out

    return run, ort.__version__


def best_of(fn, x, repeat):
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn(x)
        times.append(time.perf_counter() - t0)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--audio", default=str(DEFAULT_AUDIO))
    parser.add_argument("--seconds", type=float, default=60.0, help="repeat the audio to this length")
    parser.add_argument("--rate", type=int, choices=(16000, 8000), default=16000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--model", default=None, help="GGUF (default: the cached default model)")
    args = parser.parse_args()

    from cera.sources import bundles
    from cera.audio import load_vad
    from cera_audio_io import read_audio
    from cera_audio_vad.default import default_model_path

    onnx_path = str(bundles.fetch_file("silero-vad", quiet=True))
    model = args.model or str(default_model_path(quiet=True))
    clip = read_audio(args.audio, args.rate)
    reps = max(1, int(np.ceil(args.seconds * args.rate / len(clip.samples))))
    x = np.tile(clip.samples, reps)[: int(args.seconds * args.rate)]
    vad = load_vad(model, sample_rate=args.rate)
    x = x[: len(x) // vad.frame_samples * vad.frame_samples]  # whole frames: same work both sides
    duration = len(x) / args.rate
    n_frames = len(x) // vad.frame_samples
    ort_run, ort_version = ort_runner(onnx_path, args.rate)

    def cera_offline(a):
        return vad.probabilities(a)

    def cera_streaming(a):
        vad.reset()
        f = vad.frame_samples
        return np.array([vad.process_frame(a[i : i + f]) for i in range(0, len(a), f)], dtype=np.float32)

    # warm up, then alternate the contenders so that a noisy machine hurts them alike
    ort_run(x[: 50 * vad.frame_samples])
    cera_offline(x[: 50 * vad.frame_samples])
    results = {"onnxruntime": [], "cera offline": [], "cera streaming": []}
    outputs = {}
    for _ in range(args.repeat):
        for name, fn in (("onnxruntime", ort_run), ("cera offline", cera_offline), ("cera streaming", cera_streaming)):
            t, out = best_of(fn, x, 1)
            results[name].append(t)
            outputs[name] = out
    diff = max(float(np.max(np.abs(outputs[k] - outputs["onnxruntime"]))) for k in ("cera offline", "cera streaming"))

    print(f"Silero VAD, {duration:.1f} s of audio at {args.rate} Hz ({n_frames} frames), best of {args.repeat}, 1 thread")
    print(f"machine: {platform.processor() or platform.machine()}, numpy {np.__version__}, onnxruntime {ort_version}")
    ort_best = min(results["onnxruntime"])
    for name, times in results.items():
        best = min(times)
        print(
            f"  {name:15s} {best * 1e3:9.1f} ms   RTF {best / duration:.5f}   "
            f"{best / n_frames * 1e6:7.1f} us/frame   onnxruntime/this {ort_best / best:5.2f}x"
        )
    print(f"  max |p_cera - p_onnxruntime| = {diff:.2e}")


if __name__ == "__main__":
    main()
