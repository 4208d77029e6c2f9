"""`cera transcribe` and `cera convert whisper`.

Only click is imported here; the model, numpy and the converter load inside the
callbacks, so that ``cera --help`` stays fast.
"""

from __future__ import annotations

import json
import sys

import click

from .formats import OUT_TYPES


def _parse_temperatures(value: str) -> tuple[float, ...]:
    try:
        return tuple(float(t) for t in value.split(","))
    except ValueError:
        raise click.BadParameter(f"expected comma-separated numbers, got {value!r}") from None


def _timestamp(seconds: float) -> str:
    m, s = divmod(seconds, 60)
    h, m = divmod(int(m), 60)
    return f"{h:02d}:{m:02d}:{s:06.3f}" if h else f"{m:02d}:{s:06.3f}"


@click.command(name="transcribe")
@click.option("--audio", "audio_path", type=click.Path(dir_okay=False), required=True,
              help="Audio file (WAV, FLAC, Ogg/Opus, AIFF, MP3: anything libsndfile reads); resampled to 16 kHz mono.")
@click.option("-m", "--model", "model", default=None,
              help="Whisper GGUF file (from `cera convert whisper`), or a bundled model: tiny.en (default) or base.")
@click.option("--language", default="auto", show_default=True,
              help="Language code of the speech (en, de, ...), or auto to detect it (multilingual models).")
@click.option("--task", type=click.Choice(["transcribe", "translate"]), default="transcribe", show_default=True,
              help="translate: English text from speech in another language (multilingual models).")
@click.option("--beam", "beam_size", type=click.IntRange(min=1, max=16), default=5, show_default=True,
              help="Beam size; 1 decodes greedily.")
@click.option("--best-of", type=click.IntRange(min=1, max=16), default=5, show_default=True,
              help="Samples drawn at each fallback temperature.")
@click.option("--temperature", "temperatures", default="0,0.2,0.4,0.6,0.8,1.0", show_default=True,
              help="Temperatures to try in turn when a decode looks wrong (comma-separated).")
@click.option("--initial-prompt", default=None, help="Text that conditions the first window (names, spelling).")
@click.option("--no-condition", is_flag=True, help="Do not condition each window on the previous window's text.")
@click.option("--no-timestamps", is_flag=True, help="Decode without timestamps (one segment per window).")
@click.option("--vad", "use_vad", is_flag=True,
              help="Transcribe only the speech that Silero VAD finds, joined (needs cera-audio-vad).")
@click.option("--no-vad-gate", is_flag=True,
              help="Decode every 30 s window, even those in which Silero VAD finds no speech (Whisper then "
                   "often hears words in silence).")
@click.option("--type", "out_type", type=click.Choice(OUT_TYPES), default=None,
              help="Weight type of a bundled model (default q8_0).")
@click.option("-t", "--threads", type=click.IntRange(min=1), default=None, help="CPU threads (default: physical cores).")
@click.option("--device", default="auto", show_default=True, help="Backend to run on.")
@click.option("--timestamps", "show_times", is_flag=True,
              help="Print each segment as [start -> end] text (default: the text alone, a segment a line).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: segments with start, end, text and tokens.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
def transcribe_command(audio_path, model, language, task, beam_size, best_of, temperatures, initial_prompt,
                       no_condition, no_timestamps, use_vad, no_vad_gate, out_type, threads, device, show_times,
                       as_json, quiet):  # fmt: skip
    """Transcribe speech in an audio file with Whisper; prints the text, a segment a line
    (--timestamps: with each segment's times; --json: the segments with times and tokens)."""
    import time

    from cera.errors import AudioError

    from .transcribe import TranscribeOptions

    temps = _parse_temperatures(temperatures)
    options = TranscribeOptions(
        language=None if language == "auto" else language, task=task, beam_size=beam_size, best_of=best_of,
        temperatures=temps, initial_prompt=initial_prompt, condition_on_previous_text=not no_condition,
        without_timestamps=no_timestamps,
    )  # fmt: skip
    from cera_audio_io import open_audio

    with open_audio(audio_path, 16000):  # a missing or damaged recording is refused before the model loads
        pass
    path = _resolve_model(model, out_type, quiet)
    from .model import WhisperModel
    from .recording import open_recording
    from .transcriber import WhisperTranscriber

    tr = WhisperTranscriber(WhisperModel(path, device=device, threads=threads), options)
    # a long recording streams through in two passes, in memory that does not grow with it
    rec = open_recording(audio_path, tr.model.mel_filters, gate=not no_vad_gate and not use_vad, whole=use_vad)
    if as_json is False and not quiet and rec.source_rate != 16000:
        click.echo(f"cera: resampled {rec.source_rate} Hz to 16000 Hz", err=True)
    if not tr.model.config.multilingual:
        if options.language not in (None, "en"):
            raise AudioError(f"{path.name} is an English-only model; use --language en (or auto), or a multilingual model")
        if task == "translate":
            raise AudioError(f"{path.name} is an English-only model: it cannot translate; use a multilingual model (-m base)")

    started = time.perf_counter()
    long_file = rec.duration > 30 and not quiet and not as_json

    def progress(done: float, total: float) -> None:
        if long_file:
            click.echo(f"cera: {done:.0f}/{total:.0f} s transcribed", err=True)

    if use_vad:
        from .vad_chunks import transcribe_with_vad

        segments = transcribe_with_vad(tr, rec.samples, progress=progress)
    else:
        segments = tr.segments(rec.features, progress=progress, speech=rec.gate)
    out = []
    try:
        for s in segments:
            out.append(s)
            if not as_json:
                stamp = f"[{_timestamp(s.start)} -> {_timestamp(s.end)}] " if show_times else ""
                click.echo(stamp + s.text.strip())
    except KeyboardInterrupt:
        tr.cancel()
        raise
    elapsed = time.perf_counter() - started
    if as_json:
        last = tr.last
        click.echo(json.dumps({
            "model": str(path), "audio": str(audio_path), "duration": rec.duration,
            "language": getattr(last, "language", None), "language_probability": getattr(last, "language_probability", None),
            "seconds": round(elapsed, 3), "segments": [s.to_json() for s in out],
        }, indent=2, ensure_ascii=False))  # fmt: skip
    elif not quiet:
        click.echo(f"cera: {rec.duration:.1f} s of audio in {elapsed:.2f} s (real-time factor {elapsed / max(rec.duration, 1e-9):.3f})", err=True)
    if not out and not as_json:
        click.echo("no speech found", err=True)


def _resolve_model(model, out_type, quiet):
    from pathlib import Path

    from cera.errors import AudioError

    from .default import BUNDLES, DEFAULT_TYPE, model_path

    if model is None or model in BUNDLES:
        return model_path(model or "tiny.en", out_type or DEFAULT_TYPE, quiet=quiet)
    p = Path(model)
    if p.is_dir() or p.name == "model.bin":
        raise AudioError(
            f"{model}: a CTranslate2 folder; cera runs Whisper from GGUF. Convert it once with "
            f"`cera convert whisper {model} whisper.gguf`, or leave out -m for the default model"
        )
    if not p.exists():
        raise AudioError(f"{model}: no such file; give a Whisper GGUF file or a bundled model ({', '.join(BUNDLES)})")
    if out_type is not None:
        raise AudioError("--type chooses the weight type of a bundled model; convert a file with `cera convert whisper --type`")
    return p


@click.group(name="convert")
def convert_group():
    """Convert models from other formats to GGUF."""


@convert_group.command(name="whisper")
@click.argument("src", type=click.Path())
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--type", "out_type", type=click.Choice(OUT_TYPES), default="f16", show_default=True,
              help="Weight type of the matrices (norms, biases, tables stay float32; the convolutions float).")
def convert_whisper_command(src, out, out_type):
    """Convert a CTranslate2 Whisper folder SRC (faster-whisper's format; a bundled name such as
    tiny.en or base fetches it) to the GGUF file OUT."""
    from pathlib import Path

    from .convert import convert
    from .default import BUNDLES

    if not Path(src).exists() and src in BUNDLES:
        from cera.sources import bundles

        src = str(bundles.fetch(BUNDLES[src]))
    convert(src, out, out_type)
    click.echo(out)
    sys.stdout.flush()
