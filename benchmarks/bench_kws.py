"""Wake-word accuracy and CPU time: cera against pymicro-wakeword on the same synthesized audio.

    python benchmarks/bench_kws.py [--models okay_nabu,alexa] [--positives 60] [--hours 1.0]
                                   [--far 0.5] [--seed 0] [--out results.json]

For each model, two long 16 kHz streams are synthesized with espeak-ng and numpy:

- positives: the wake word, ``--positives`` times, each with a random voice (``VOICES``),
  speed (110-210 words per minute) and pitch, mixed with white, pink or brown noise at
  20, 10 or 5 dB SNR, at a random level from soft (-45 dBFS peak) to loud (-1 dBFS), with
  2.5 s of the same noise between utterances;
- negatives, ``--hours`` long: sentences of common words (no wake word), near-miss phrases
  (``NEAR_MISSES``, and the other models' wake words), and stretches of noise, in the same
  voices, noises and levels.

Every detector reads the same streams. Each gives a probability per 30 ms step; detections
follow the models' rule (mean of the last 5 steps above a threshold, then 1 s refractory).
A positive counts as detected if a detection falls within its utterance or the 1 s after
it; every detection in the negatives is a false accept. Sweeping the threshold gives the
false-reject rate at the largest false-accept rate per hour not above ``--far``, and the
rates at the model's own threshold.

Detectors: ``cera`` (`HotwordDetector`, every step), ``cera+vad+agc`` (`HotwordIterator`
with the Silero VAD gate and gain control), ``pymicro-wakeword`` (its features and its
TensorFlow Lite library, driven as its own streaming API drives them). CPU time is
process time over the whole stream, divided by the stream's duration, one thread each.
"""

from __future__ import annotations

import os

for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import argparse  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

SR = 16000
STEP_S = 0.03
MODELS = {"okay_nabu": "okay nabu", "hey_jarvis": "hey jarvis", "hey_mycroft": "hey mycroft", "alexa": "alexa"}
VOICES = ["en-us", "en", "en-gb-x-rp", "en-us+f3", "en+m3", "en-029", "en-us+f2", "en+f4", "en-gb-scotland"]
NEAR_MISSES = {
    "okay_nabu": ["okay google", "okay navy", "okay now", "hey nabu", "okay nobody", "ok, no boo"],
    "hey_jarvis": ["hey travis", "hey jarvie", "hey jar", "hey service", "jarvis cocker", "hey garbage"],
    "hey_mycroft": ["hey microsoft", "my craft", "hey mike", "hey minecraft", "hey my crowd", "micro soft"],
    "alexa": ["alex", "a lexus", "alexis", "electra", "alexander", "a lexa sign"],
}
WORDS = (
    "the of and to in is you that it he was for on are as with his they at be this have from or one had by word "
    "but not what all were we when your can said there use an each which she do how their if will up other about "
    "out many then them these so some her would make like him into time has look two more write go see number no "
    "way could people my than first water been call who oil its now find long down day did get come made may part "
    "over new sound take only little work know place year live me back give most very after thing our just name "
    "good sentence man think say great where help through much before line right too mean old any same tell boy "
    "follow came want show also around form three small set put end does another well large must big even such "
    "because turn here why ask went men read need land different home us move try kind hand picture again change "
    "off play spell air away animal house point page letter mother answer found study still learn should america "
    "world weather music lights kitchen timer tomorrow morning evening please thanks"
).split()


def espeak(text: str, voice: str, speed: int, pitch: int) -> np.ndarray:
    import soundfile as sf
    import soxr

    wav = subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "--stdout", text],
                         capture_output=True, check=True).stdout
    x, sr = sf.read(io.BytesIO(wav), dtype="float32")
    return soxr.resample(x, sr, SR).astype(np.float32)


def noise(kind: str, n: int, rng) -> np.ndarray:
    w = rng.standard_normal(n)
    if kind == "white":
        x = w
    else:
        spec = np.fft.rfft(w)
        f = np.fft.rfftfreq(n, 1 / SR)
        f[0] = f[1]
        spec /= np.sqrt(f) if kind == "pink" else f
        x = np.fft.irfft(spec, n)
    return (x / (np.std(x) + 1e-12)).astype(np.float32)


class Stream:
    """A synthesized stream and where its wake words are."""

    def __init__(self):
        self.parts: list[np.ndarray] = []
        self.n = 0
        self.targets: list[tuple[float, float]] = []

    def add(self, x: np.ndarray, target: bool = False):
        if target:
            self.targets.append((self.n / SR, (self.n + len(x)) / SR))
        self.parts.append(x)
        self.n += len(x)

    def audio(self) -> np.ndarray:
        return np.clip(np.concatenate(self.parts), -1, 32767 / 32768).astype(np.float32)


def _mix(speech: np.ndarray, rng, gap_s: float) -> tuple[np.ndarray, np.ndarray]:
    """speech in noise at a random SNR and level, with gap_s of noise after; (utterance, gap)."""
    kind = rng.choice(["white", "pink", "brown"])
    snr = rng.choice([20.0, 10.0, 5.0])
    gap = int(gap_s * SR)
    nz = noise(kind, len(speech) + gap, rng)
    active = speech[np.abs(speech) > 0.02 * np.max(np.abs(speech))]
    s_rms = float(np.sqrt(np.mean(active**2))) if len(active) else 1e-3
    mixed = np.concatenate([speech, np.zeros(gap, np.float32)]) + nz * (s_rms / 10 ** (snr / 20))
    level = 10 ** (rng.uniform(-45, -1) / 20)
    mixed *= level / (np.max(np.abs(mixed)) + 1e-12)
    return mixed[: len(speech)], mixed[len(speech) :]


def _voice(rng):
    return rng.choice(VOICES), int(rng.integers(110, 211)), int(rng.integers(30, 71))


def positives(model: str, n: int, rng) -> Stream:
    s = Stream()
    for _ in range(n):
        utt, gap = _mix(espeak(MODELS[model], *_voice(rng)), rng, 2.5)
        s.add(utt, target=True)
        s.add(gap)
    return s


def negatives(model: str, hours: float, rng) -> Stream:
    s = Stream()
    misses = NEAR_MISSES[model] + [p for m, p in MODELS.items() if m != model]
    while s.n < hours * 3600 * SR:
        r = rng.random()
        if r < 0.6:
            text = " ".join(rng.choice(WORDS, int(rng.integers(5, 16))))
        elif r < 0.85:
            text = str(rng.choice(misses))
        else:
            text = None
        if text is None:  # noise alone
            utt = noise(str(rng.choice(["white", "pink", "brown"])), int(rng.uniform(3, 10) * SR), rng)
            utt *= 10 ** (rng.uniform(-45, -1) / 20) / (np.max(np.abs(utt)) + 1e-12)
            gap = np.zeros(0, np.float32)
        else:
            utt, gap = _mix(espeak(text, *_voice(rng)), rng, float(rng.uniform(0.5, 2.0)))
        s.add(utt)
        s.add(gap)
    return s


# -- detectors: per-step probabilities and CPU time ---------------------------------------


def run_cera(gguf, audio: np.ndarray, gated: bool):
    from cera_audio_kws.detector import HotwordDetector
    from cera_audio_kws.gated import HotwordIterator

    det = HotwordDetector.open(gguf)  # loading is not timed (nor is the reference's)
    it = HotwordIterator(det, vad=None, agc=True) if gated else None
    trace: list = []
    chunk = 1600  # 100 ms, as a live stream arrives
    t0 = time.process_time()
    if gated:
        for i in range(0, len(audio), chunk):
            it.push(audio[i : i + chunk], trace)
        it.flush(trace)
    else:
        for i in range(0, len(audio), chunk):
            det.push(audio[i : i + chunk], trace)
    cpu = time.process_time() - t0
    return np.array([s.time for s in trace]), np.array([s.probability for s in trace]), cpu


def run_reference(model: str, audio: np.ndarray):
    from pymicro_wakeword import MicroWakeWord, MicroWakeWordFeatures, Model

    mww = MicroWakeWord.from_builtin(Model(model))
    feats = MicroWakeWordFeatures()
    pcm = np.clip(np.round(audio * 32768), -32768, 32767).astype("<i2").tobytes()
    probs = []
    chunk = 3200  # bytes: 100 ms
    t0 = time.process_time()
    for i in range(0, len(pcm), chunk):
        for f in feats.process_streaming(pcm[i : i + chunk]):
            mww.process_streaming_prob(f)
            if not mww._features:  # a step ran: its probability is the newest in the window
                probs.append(mww._probabilities[-1])
    cpu = time.process_time() - t0
    times = ((3 * np.arange(len(probs)) + 2) * 160 + 480) / SR
    return times, np.array(probs), cpu


def detections(times, probs, threshold, window=5, refractory=1.0) -> np.ndarray:
    """Detection times: sliding mean of ``window`` consecutive steps above ``threshold``,
    at most one per ``refractory`` seconds (the window refills within it, so emptying it
    after a detection changes nothing)."""
    if len(probs) < window:
        return np.zeros(0)
    contiguous = np.isclose(np.diff(times), STEP_S, atol=1e-6)
    means = np.convolve(probs, np.ones(window) / window, mode="valid")
    ok = np.convolve(contiguous.astype(float), np.ones(window - 1), mode="valid") >= window - 1 - 1e-9
    idx = np.nonzero((means > threshold) & ok)[0] + window - 1
    out, last = [], -np.inf
    for i in idx:
        if times[i] - last >= refractory:
            out.append(times[i])
            last = times[i]
    return np.array(out)


def score(pos, neg, targets, hours, threshold):
    found = detections(*pos, threshold)
    hit = sum(any(a <= t <= b + 1.0 for t in found) for a, b in targets)
    fa = len(detections(*neg, threshold))
    return 1 - hit / len(targets), fa / hours


def at_far(pos, neg, targets, hours, far):
    """(false-reject rate, false accepts per hour, threshold) at the lowest threshold whose
    false-accept rate is at most ``far``."""
    best = None
    for thr in np.round(np.arange(0.995, 0.0, -0.005), 3):
        frr, fah = score(pos, neg, targets, hours, thr)
        if fah > far:
            break
        best = (frr, fah, float(thr))
    return best or (1.0, float("nan"), 1.0)


def print_table(rows, args) -> None:
    print()
    print(f"positives per model: {args.positives}; negatives: {args.hours} h per model; seed {args.seed}; "
          f"{platform.processor() or platform.machine()}, one thread")
    print()
    print(f"| model | detector | FRR at <= {args.far} FA/h (threshold) | FRR / FA per h at the model's threshold "
          f"| CPU s per audio s |")
    print("|---|---|---|---|---|")
    for row in rows:
        for name in ("cera", "cera+vad+agc", "pymicro-wakeword"):
            r = row[name]
            if r["far"] != r["far"]:  # NaN: even the highest threshold swept accepts more
                at = f"none: > {args.far} FA/h even at 0.995"
            else:
                at = f"{r['frr_at_far']:.1%} ({r['threshold_at_far']:.3f})"
            print(f"| {row['model']} | {name} | {at} "
                  f"| {r['frr']:.1%} / {r['fa_per_hour']:.1f} ({row['threshold']:.2f}) | {r['cpu_per_audio_s']:.4f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--positives", type=int, default=60)
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--far", type=float, default=0.5, help="false accepts per hour for the FRR column")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="also write the numbers as JSON here")
    ap.add_argument("--table", default=None, metavar="JSON", help="only print the table of an --out file")
    args = ap.parse_args()
    if args.table:
        with open(args.table) as f:
            doc = json.load(f)
        print_table(doc["rows"], argparse.Namespace(**doc["args"]))
        return

    from cera_audio_kws.models import model_path

    rows = []
    for model in args.models.split(","):
        rng = np.random.default_rng(args.seed)
        pos_stream, neg_stream = positives(model, args.positives, rng), negatives(model, args.hours, rng)
        pos_audio, neg_audio = pos_stream.audio(), neg_stream.audio()
        hours = len(neg_audio) / SR / 3600
        gguf = model_path(model, quiet=True)
        from cera_audio_kws.detector import HotwordDetector

        own = HotwordDetector.open(gguf).threshold
        row = {"model": model, "positives": len(pos_stream.targets), "negative_hours": round(hours, 4),
               "threshold": own}
        for name, run in (("cera", lambda a, g=gguf: run_cera(g, a, False)),
                          ("cera+vad+agc", lambda a, g=gguf: run_cera(g, a, True)),
                          ("pymicro-wakeword", lambda a, m=model: run_reference(m, a))):
            pt, pp, cpu_p = run(pos_audio)
            nt, np_, cpu_n = run(neg_audio)
            frr, fah, thr = at_far((pt, pp), (nt, np_), pos_stream.targets, hours, args.far)
            frr0, fah0 = score((pt, pp), (nt, np_), pos_stream.targets, hours, own)
            seconds = (len(pos_audio) + len(neg_audio)) / SR
            row[name] = {"frr_at_far": frr, "far": fah, "threshold_at_far": thr, "frr": frr0, "fa_per_hour": fah0,
                         "cpu_per_audio_s": (cpu_p + cpu_n) / seconds}
        rows.append(row)
        print(json.dumps(row), flush=True)

    print_table(rows, args)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
