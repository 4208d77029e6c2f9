"""`cera kws` and `cera kws-convert`.

Only click is imported here; numpy and the model load inside the callbacks, so that
``cera --help`` stays fast.
"""

from __future__ import annotations

import json
import sys

import click


def _emit(obj: dict) -> None:
    click.echo(json.dumps(obj))
    sys.stdout.flush()  # a live stream wants each line as it happens


@click.command(name="kws")
@click.option("--audio", "audio_path", required=True, metavar="FILE|-",
              help="Audio file (anything libsndfile reads), or - for raw 16-bit little-endian mono PCM on "
                   "standard input at the model's rate (16 kHz).")
@click.option("--model", default="okay-nabu", show_default=True, metavar="NAME|PATH",
              help="okay-nabu, hey-jarvis, hey-mycroft, alexa (`cera models --kind kws`), a .gguf from "
                   "`cera kws-convert`, or a .tflite with its .json beside it.")
@click.option("--threshold", type=float, default=None, metavar="P",
              help="Detect when the sliding mean of probabilities exceeds P. [default: the model's]")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line per detection.")
@click.option("--trace", is_flag=True, help="Also one JSON object per line per network step: time and probability.")
@click.option("--no-vad", is_flag=True, help="Run the network on every step (no Silero VAD gate).")
@click.option("--no-agc", is_flag=True, help="No adaptive gain control.")
def kws_command(audio_path, model, threshold, as_json, trace, no_vad, no_agc):
    """Detect a wake word in audio (microWakeWord); prints the time of each detection."""

    from cera_audio_io import open_audio, read_raw_pcm

    from .detector import load_hotword_detector
    from .gated import HotwordIterator

    detector = load_hotword_detector(model, threshold=threshold)
    steps: list | None = [] if trace else None
    json_lines = as_json or trace

    def report(found):
        # steps and detections in time order (a detection right after the step that made it)
        events = [(s.time, 0, s) for s in steps or ()] + [(d.time, 1, d) for d in found]
        for _, _, e in sorted(events, key=lambda e: (e[0], e[1])):
            if json_lines:
                _emit(e.to_json())
            else:
                click.echo(f"{e.time:.3f}\t{e.wake_word}\t{e.probability:.3f}")
                sys.stdout.flush()
        if steps:
            steps.clear()
        return len(found)

    n = 0
    if audio_path == "-":
        it = HotwordIterator(detector, vad=False if no_vad else None, agc=not no_agc)
        for pcm in read_raw_pcm(sys.stdin.buffer):
            n += report(it.push(pcm, steps))
        n += report(it.flush(steps))
    else:
        with open_audio(audio_path, [detector.sample_rate]) as stream:
            it = HotwordIterator(detector, vad=False if no_vad else None, agc=not no_agc)
            for block in stream:
                n += report(it.push(block, steps))
            n += report(it.flush(steps))
    if n == 0 and not json_lines:
        click.echo(f"no '{detector.wake_word}' detected", err=True)


@click.command(name="kws-convert")
@click.argument("tflite", type=click.Path(dir_okay=False))
@click.option("--json", "settings", type=click.Path(dir_okay=False), default=None,
              help="microWakeWord's settings file (default: the .json beside the model).")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="The GGUF file to write.")
def kws_convert_command(tflite, settings, output):
    """Convert a microWakeWord model (.tflite + .json settings) to GGUF."""
    from .convert import convert

    click.echo(str(convert(tflite, output, settings)))
