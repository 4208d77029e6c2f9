"""`cera diarize` and `cera diarize-convert`.

Only click is imported here; the model and numpy load inside the callbacks, so that
``cera --help`` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from .thresholds import DEFAULT_MAX_SPEAKERS, DEFAULT_THRESHOLD

DEFAULT_MODEL = "resemblyzer-ge2e"


def resolve_model(model: str | None) -> str:
    """A GGUF path for ``-m``: the default bundle's conversion, or a file."""
    from cera.errors import ModelNotFound

    if model in (None, DEFAULT_MODEL):
        from .default import default_model_path

        return str(default_model_path())
    path = Path(model)
    if path.suffix == ".pt":
        raise ModelNotFound(
            f"{model}: a PyTorch checkpoint; cera runs the speaker encoder from GGUF. Convert it once with "
            f"`cera diarize-convert --pt {model} encoder.gguf`, or leave out -m to use the default model"
        )
    if path.suffix == ".nemo" or (not path.exists() and "/" in model and not model.startswith((".", "/"))):
        raise ModelNotFound(
            f"{model}: Streaming Sortformer (NeMo) models are not supported by cera-audio-diarizer yet; "
            f"the installed diarizer runs the GE2E speaker encoder ({DEFAULT_MODEL}, the default)"
        )
    if not path.is_file():
        raise ModelNotFound(f"{model}: no such model file; give a GGUF path or leave out -m for {DEFAULT_MODEL}")
    return str(path)


@click.command(name="diarize")
@click.option("--audio", "audio_path", type=click.Path(dir_okay=False), required=True,
              help="Audio file (anything libsndfile reads); resampled to 16 kHz mono.")  # fmt: skip
@click.option("-m", "--model", default=None, help=f"Speaker-encoder GGUF, or {DEFAULT_MODEL} (the default).")
@click.option("--speakers", type=click.IntRange(1, 64), default=DEFAULT_MAX_SPEAKERS, show_default=True,
              help="At most this many speakers.")  # fmt: skip
@click.option("--threshold", type=click.FloatRange(0.0, 2.0, min_open=True, max_open=True), default=DEFAULT_THRESHOLD,
              show_default=True, help="Cosine distance above which a segment starts a new speaker.")  # fmt: skip
@click.option("--rttm", "as_rttm", is_flag=True, help="Print RTTM lines (NIST's format).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with the turns.")
@click.option("--device", default="auto", show_default=True, help="Backend for the speaker encoder.")
@click.option("-t", "--threads", type=click.IntRange(min=1), default=None, help="CPU threads (default: physical cores).")
def diarize_command(audio_path, model, speakers, threshold, as_rttm, as_json, device, threads):
    """Who spoke when: speaker turns of an audio file (start, end, speaker)."""
    from cera.audio import load_diarizer
    from cera_audio_io import open_audio
    from cera.errors import InvalidOptions

    if as_rttm and as_json:
        raise InvalidOptions("--rttm and --json are two output formats; give one of them")
    path = resolve_model(model)
    turns, n = [], 0
    with open_audio(audio_path, 16000) as stream:  # the file is checked before the model loads
        diarizer = load_diarizer(path, device=device, threads=threads, max_speakers=speakers, threshold=threshold)
        try:
            for block in stream:
                n += len(block)
                turns += diarizer.push(block)
            turns += diarizer.flush()
        finally:
            diarizer.close()
    sample_rate = diarizer.sample_rate
    file_id = Path(audio_path).stem.replace(" ", "_") or "audio"
    if as_rttm:
        for t in turns:
            click.echo(t.rttm(file_id))
    elif as_json:
        doc = {"audio": str(audio_path), "model": path, "duration": round(n / sample_rate, 3),
               "speakers": len({t.speaker for t in turns}), "turns": [t.to_json() for t in turns]}  # fmt: skip
        click.echo(json.dumps(doc, indent=2))
    else:
        for t in turns:
            click.echo(f"{t.start:.3f}\t{t.end:.3f}\t{t.label}")
    if not turns:
        click.echo("no speech found", err=True)


@click.command(name="diarize-convert")
@click.argument("output", type=click.Path(dir_okay=False))
@click.option("--pt", "pt_path", type=click.Path(dir_okay=False), default=None,
              help="resemblyzer's pretrained.pt (default: the resemblyzer package's, fetched and checked).")  # fmt: skip
def diarize_convert_command(output, pt_path):
    """Convert the GE2E speaker encoder (resemblyzer's PyTorch checkpoint) to a GGUF file OUTPUT."""
    from .convert import convert

    if pt_path is None:
        from cera.sources import bundles

        pt_path = bundles.fetch_file("resemblyzer-ge2e")
    click.echo(str(convert(pt_path, output)))
