"""`cera vad` and `cera vad-convert`.

Only click is imported here; the model, numpy and onnx load inside the callbacks, so that
``cera --help`` stays fast.
"""

from __future__ import annotations

import json
import math

import click

# SegmentParams field -> the flag that sets it
_FLAGS = {
    "min_silence_at_max_speech_ms": "--min-silence-at-max-speech-ms",
    "min_speech_duration_ms": "--min-speech-ms",
    "min_silence_duration_ms": "--min-silence-ms",
    "max_speech_duration_s": "--max-speech-s",
    "speech_pad_ms": "--speech-pad-ms",
    "neg_threshold": "--neg-threshold",
    "threshold": "--threshold",
}


def _rate_choice(value: str) -> int | None:
    return None if value == "auto" else int(value)


@click.command(name="vad")
@click.option(
    "--model",
    "model_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Silero VAD GGUF file (default: converted from the silero-vad package on first use, then cached).",
)
@click.option(
    "--audio",
    "audio_path",
    type=click.Path(dir_okay=False),
    required=True,
    help="Audio file (WAV, FLAC, Ogg/Opus, AIFF, MP3: anything libsndfile reads).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (with sample positions) instead of lines of text.")
@click.option(
    "--rate",
    type=click.Choice(["auto", "16000", "8000"]),
    default="auto",
    show_default=True,
    help="Model rate to run at; auto: the file's own if the model has it, else 16000.",
)
@click.option(
    "--no-resample",
    is_flag=True,
    help="Refuse audio whose rate the model does not run at, instead of resampling it.",
)
@click.option("--threshold", type=float, default=0.5, show_default=True, help="Speech starts at this probability.")
@click.option(
    "--neg-threshold",
    type=float,
    default=None,
    help="Silence starts below this probability. [default: threshold - 0.15, at least 0.01]",
)
@click.option("--min-speech-ms", type=float, default=250, show_default=True, help="Drop shorter speech.")
@click.option(
    "--min-silence-ms", type=float, default=100, show_default=True, help="Silence that ends a segment."
)
@click.option("--speech-pad-ms", type=float, default=30, show_default=True, help="Padding on each side.")
@click.option(
    "--max-speech-s",
    type=float,
    default=math.inf,
    show_default=True,
    help="Split segments longer than this (at the longest silence inside, if any).",
)
@click.option(
    "--min-silence-at-max-speech-ms",
    type=float,
    default=98,
    show_default=True,
    help="Shortest silence a too-long segment may be split at.",
)
@click.option(
    "--split-at-last-silence",
    is_flag=True,
    help="Split too-long segments at the last such silence instead of the longest.",
)
@click.option("--frames", "show_frames", is_flag=True, help="Also print each frame's speech probability.")
def vad_command(
    model_path,
    audio_path,
    as_json,
    rate,
    no_resample,
    threshold,
    neg_threshold,
    min_speech_ms,
    min_silence_ms,
    speech_pad_ms,
    max_speech_s,
    min_silence_at_max_speech_ms,
    split_at_last_silence,
    show_frames,
):
    """Detect speech in an audio file (Silero VAD); prints start and end seconds per segment."""
    import numpy as np

    from cera.audio import SegmentParams
    from cera_audio_io import open_audio
    from cera.errors import AudioError

    given = {
        "threshold": threshold,
        "neg_threshold": neg_threshold,
        "min_speech_duration_ms": min_speech_ms,
        "min_silence_duration_ms": min_silence_ms,
        "speech_pad_ms": speech_pad_ms,
        "max_speech_duration_s": max_speech_s,
        "min_silence_at_max_speech_ms": min_silence_at_max_speech_ms,
    }
    try:
        params = SegmentParams(**given, use_max_possible_silence_at_max_speech=not split_at_last_silence)
    except AudioError as e:
        # SegmentParams' message starts with its field's name; a user of the command knows the flag
        message = str(e)
        field = message.split(" ", 1)[0]
        raise AudioError(_FLAGS.get(field, field) + message[len(field):]) from None
    if model_path is None:
        from .default import default_model_path

        model_path = str(default_model_path())
    elif model_path.lower().endswith(".onnx"):
        raise AudioError(
            f"{model_path}: an ONNX file; cera runs Silero VAD from GGUF. Convert it once with "
            f"`cera vad-convert silero-vad.gguf --onnx {model_path}`, or leave out --model to use the default model"
        )

    from cera.audio import SpeechSegmenter, load_vad

    wanted = _rate_choice(rate)
    vad = load_vad(model_path, sample_rate=wanted)
    # auto: keep the file's own rate where the model runs at it (no resampling), else the first.
    accepted = vad.sample_rates if wanted is None else [wanted]
    # The file goes through in blocks (read, downmixed, resampled, detected): memory does
    # not grow with its length, only the per-frame probabilities do (one float per frame).
    with open_audio(audio_path, accepted, resample_ok=not no_resample) as stream:
        info = stream.info
        if info.sample_rate != vad.sample_rate:
            vad = load_vad(model_path, sample_rate=info.sample_rate)
        segmenter = SpeechSegmenter(sample_rate=vad.sample_rate, frame_samples=vad.frame_samples, params=params)
        vad.reset()
        probs, segments, n_samples = [], [], 0
        for block in stream:
            n_samples += len(block)
            p = vad.process(block)
            probs.append(p)
            segments += segmenter.push_many(p)
        p = vad.flush()
        probs.append(p)
        segments += segmenter.push_many(p) + segmenter.finish(n_samples)
        probs = np.concatenate(probs)
    if n_samples < 2:
        raise AudioError(f"{audio_path}: holds too few samples to be a recording")

    if as_json:
        doc = {
            "model": str(model_path),
            "audio": str(audio_path),
            "sample_rate": vad.sample_rate,
            "source_sample_rate": info.source_rate,
            "source_channels": info.source_channels,
            "duration": n_samples / vad.sample_rate,
            "frame_samples": vad.frame_samples,
            "params": {
                "threshold": params.threshold,
                "neg_threshold": params.effective_neg_threshold,
                "min_speech_duration_ms": params.min_speech_duration_ms,
                "min_silence_duration_ms": params.min_silence_duration_ms,
                "speech_pad_ms": params.speech_pad_ms,
                "max_speech_duration_s": None if math.isinf(params.max_speech_duration_s) else params.max_speech_duration_s,
                "min_silence_at_max_speech_ms": params.min_silence_at_max_speech_ms,
                "use_max_possible_silence_at_max_speech": params.use_max_possible_silence_at_max_speech,
            },
            "segments": [s.to_json() for s in segments],
        }
        if show_frames:
            doc["frames"] = [round(float(p), 6) for p in probs]
        click.echo(json.dumps(doc, indent=2))
        return
    if show_frames:
        for i, p in enumerate(probs):
            click.echo(f"# frame {i * vad.frame_seconds:9.3f} {p:.4f}")
    for s in segments:
        click.echo(f"{s.start_seconds:.3f}\t{s.end_seconds:.3f}")
    if not segments:
        click.echo("no speech found", err=True)


@click.command(name="vad-convert")
@click.argument("output", type=click.Path(dir_okay=False))
@click.option(
    "--onnx",
    "onnx_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Silero VAD ONNX file (default: silero_vad.onnx of the silero-vad package, fetched and checked).",
)
def vad_convert_command(output, onnx_path):
    """Convert Silero VAD from ONNX (v5/v6, both sample rates) to a GGUF file OUTPUT."""
    from .convert import convert

    if onnx_path is None:
        from cera.sources import bundles

        onnx_path = bundles.fetch_file("silero-vad")
    click.echo(str(convert(onnx_path, output)))
