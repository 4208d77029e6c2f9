"""`cera listen`: the AudioPipeline on a recording or on standard input.

Only click is imported here; the components load inside the callback, so that
``cera --help`` stays fast.
"""

from __future__ import annotations

import json
import sys

import click


def _text(event) -> str:
    doc = event.to_json()
    kind = doc["event"]
    if kind == "hotword":
        return f"{doc['time']:.3f}\thotword\t{doc['wake_word']}"
    if kind == "transcript":
        who = f"{doc['speaker']}: " if "speaker" in doc else ""
        return f"{doc['start']:.3f}\t{doc['end']:.3f}\t{who}{doc['text']}"
    if kind == "cancelled":
        return f"{doc['start']:.3f}\t{doc['end']:.3f}\t(cancelled)"
    return ""  # speech_start / speech_end: only in --json


@click.command(name="listen")
@click.option("--audio", "audio_path", required=True, metavar="FILE|-",
              help="Audio file (anything libsndfile reads; resampled to 16 kHz mono), or - for raw 16-bit "
                   "little-endian mono PCM at 16 kHz (or a WAV stream of it) on standard input.")  # fmt: skip
@click.option("--wake", default=None, metavar="NAME|PATH",
              help="Transcribe only what follows this wake word: okay-nabu, hey-jarvis, hey-mycroft, alexa "
                   "(`cera models --kind kws`) or a model file. Without it every utterance is transcribed.")  # fmt: skip
@click.option("--wake-threshold", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=None,
              help="Wake-word detection threshold. [default: the model's]")
@click.option("--diarize", is_flag=True, help="Label each transcript with its speaker (needs cera-audio-diarizer).")
@click.option("--speakers", type=click.IntRange(1, 64), default=4, show_default=True,
              help="With --diarize: at most this many speakers.")  # fmt: skip
@click.option("-m", "--model", default=None, help="Whisper GGUF, or a bundled model: tiny.en (default) or base.")
@click.option("--silence-ms", type=click.FloatRange(0), default=500, show_default=True,
              help="Silence that ends an utterance.")  # fmt: skip
@click.option("--max-utterance-ms", type=click.FloatRange(1000), default=20000, show_default=True,
              help="Longer speech is cut here (at its quietest moment of the last second) and goes on.")  # fmt: skip
@click.option("--pre-roll-ms", type=click.FloatRange(0), default=300, show_default=True,
              help="Audio kept before the VAD's first speech frame, so an utterance's onset is not clipped.")  # fmt: skip
@click.option("--listen-timeout-ms", type=click.FloatRange(0), default=5000, show_default=True,
              help="With --wake: back to waiting for the wake word when no speech follows it this long.")  # fmt: skip
@click.option("-t", "--threads", type=click.IntRange(min=1), default=None, help="CPU threads (default: physical cores).")
@click.option("--device", default="auto", show_default=True, help="Backend for Whisper and the speaker encoder.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line per event.")
def listen_command(audio_path, wake, wake_threshold, diarize, speakers, model, silence_ms, max_utterance_ms,
                   pre_roll_ms, listen_timeout_ms, threads, device, as_json):  # fmt: skip
    """Listen to audio: wake word, speech, transcripts (and speakers), as they happen."""

    from cera.audio import PipelineParams
    from cera_audio_io import open_audio

    from .assemble import build_pipeline
    from .stdin import stdin_blocks

    params = PipelineParams(end_silence_ms=silence_ms, max_utterance_ms=max_utterance_ms, pre_roll_ms=pre_roll_ms,
                            listen_timeout_ms=listen_timeout_ms)  # fmt: skip
    live = audio_path == "-"
    blocks = None if live else open_audio(audio_path, 16000)  # the file is checked before the models load
    # A file's events come out in the same order every run (each push waits for the
    # transcripts it completed); a live stream never waits for the transcriber.
    try:
        pipeline = build_pipeline(wake=wake, whisper=model, diarize=diarize, speakers=speakers, params=params,
                                  wait=not live, wake_threshold=wake_threshold, device=device, threads=threads)  # fmt: skip
    except BaseException:
        if blocks is not None:
            blocks.close()
        raise
    counts = {"transcript": 0}

    def emit(events):
        for e in events:
            doc = e.to_json()
            counts[doc["event"]] = counts.get(doc["event"], 0) + 1
            line = json.dumps(doc, ensure_ascii=False) if as_json else _text(e)
            if line:
                click.echo(line)
                sys.stdout.flush()

    try:
        if live:
            for block in stdin_blocks(sys.stdin.buffer):
                emit(pipeline.push(block))
        else:
            with blocks:
                for block in blocks:
                    emit(pipeline.push(block))
        emit(pipeline.flush())
    except KeyboardInterrupt:
        pipeline.cancel()
        raise
    finally:
        pipeline.close()
    if not as_json:
        if wake is not None and not counts.get("hotword"):
            click.echo(f"the wake word {wake!r} was not heard", err=True)
        elif not counts["transcript"]:
            click.echo("no speech transcribed", err=True)
