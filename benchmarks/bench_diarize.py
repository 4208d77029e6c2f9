"""Speaker diarization: DER against an RTTM and speed, on synthesized conversations.

    python benchmarks/bench_diarize.py [AUDIO ...] [--threshold 0.21] [--speakers 4]
                                       [--collar 0.25] [--threads 2] [--out results.json]

Without AUDIO, the longer conversations of tests/audio_diarizer/data/make_conversations.py
(``--long``: 12 turns of 2 and 3 espeak-ng voices) are synthesized into a temporary
folder. Each AUDIO file needs its reference beside it (same name, ``.rttm``). For every file
the GE2E diarizer (`cera.audio.load_diarizer` on cera-audio-diarizer's default model)
streams the audio in 0.5 s chunks; the table gives the DER (missed speech, false alarm,
speaker confusion; NIST's definitions, ``--collar`` seconds around each reference boundary
not scored) and the real-time factor (wall time of the diarizer over the audio's length).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("audio", nargs="*", type=Path)
    ap.add_argument("--threshold", type=float, default=None)
    ap.add_argument("--speakers", type=int, default=4)
    ap.add_argument("--collar", type=float, default=0.25)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    from cera.audio import load_diarizer
    from cera_audio_diarizer.cluster import DEFAULT_THRESHOLD
    from cera_audio_diarizer.default import default_model_path
    from cera_audio_diarizer.der import Turn, der, read_rttm
    from cera_audio_io import read_audio

    files = list(args.audio)
    tmp = None
    if not files:
        tmp = tempfile.TemporaryDirectory()
        script = ROOT / "tests" / "audio_diarizer" / "data" / "make_conversations.py"
        out = subprocess.run([sys.executable, str(script), tmp.name, "--long"], check=True, capture_output=True, text=True)
        files = [Path(line) for line in out.stdout.split()]
    threshold = DEFAULT_THRESHOLD if args.threshold is None else args.threshold
    diarizer = load_diarizer(default_model_path(), threads=args.threads, threshold=threshold,
                             max_speakers=args.speakers)  # fmt: skip
    rows = []
    for path in files:
        ref = read_rttm(path.with_suffix(".rttm"))
        x = read_audio(path, 16000).samples
        t0 = time.perf_counter()
        turns = diarizer.diarize(x, chunk=8000)
        wall = time.perf_counter() - t0
        r = der(ref, [Turn(t.start, t.end, t.label) for t in turns], collar=args.collar)
        rows.append({"file": path.name, "duration": round(len(x) / 16000, 2), "speakers_ref": len({t.speaker for t in ref}),
                     "speakers_found": len({t.speaker for t in turns}), **r.to_json(), "rtf": round(wall / (len(x) / 16000), 4)})  # fmt: skip
    print(f"threshold {threshold}, collar {args.collar} s, at most {args.speakers} speakers")
    print("| file | s | speakers (ref / found) | DER % | missed s | false alarm s | confusion s | RTF |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['file']} | {r['duration']} | {r['speakers_ref']} / {r['speakers_found']} | {100 * r['der']:.1f} | "
              f"{r['missed']:.2f} | {r['false_alarm']:.2f} | {r['confusion']:.2f} | {r['rtf']:.3f} |")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({"threshold": threshold, "collar": args.collar, "rows": rows}, indent=1) + "\n")
    diarizer.close()
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
