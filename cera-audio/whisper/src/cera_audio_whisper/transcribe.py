"""Transcribing audio of any length: 30 s windows, seeking by the timestamps decoded.

The loop follows faster-whisper's (and so Whisper's) so that, with the same model and
float32 compute, both give the same tokens: features of the whole recording; per window
the previous text as a prompt (`condition_on_previous_text`, reset after a decode that
needed a temperature above ``prompt_reset_on_temperature``); decoding with the
temperature fallback (a transcript too repetitive -- compression ratio -- or too unlikely
-- average log-probability -- is decoded again at the next temperature, unless the window
is silence); windows judged silent (no-speech probability above its threshold and a low
log-probability) skipped; the tokens cut into segments at pairs of timestamps, and the
next window starting at the last complete segment's end.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator

import attrs
import numpy as np

from cera.errors import AudioError, CeraError

from . import mel as melmod
from .decode import DecodeOptions, DecodeResult, WindowDecoder
from .rules import SuppressBlank, SuppressTokens, TimestampRules, non_speech_tokens

TIME_PRECISION = 0.02  # seconds per timestamp step
INPUT_STRIDE = 2  # mel frames per encoder position
FRAMES_PER_SECOND = 100


class TranscriptionCancelled(CeraError):
    """`cancel()` was called: transcription stopped between windows."""


@attrs.frozen
class TranscribeOptions:
    language: str | None = None  # None: detect (multilingual models); English-only models use "en"
    task: str = "transcribe"  # or "translate" (to English; multilingual models)
    beam_size: int = 5
    best_of: int = 5
    patience: float = 1.0
    length_penalty: float = 1.0
    temperatures: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    compression_ratio_threshold: float | None = 2.4
    log_prob_threshold: float | None = -1.0
    no_speech_threshold: float | None = 0.6
    condition_on_previous_text: bool = True
    prompt_reset_on_temperature: float = 0.5
    initial_prompt: str | None = None
    suppress_blank: bool = True
    suppress_tokens: tuple[int, ...] | None = (-1,)  # -1: the non-speech symbols
    without_timestamps: bool = False
    max_initial_timestamp: float = 1.0
    seed: int | None = 0  # sampling at temperatures above 0

    def __attrs_post_init__(self):
        from cera.errors import InvalidOptions

        if self.task not in ("transcribe", "translate"):
            raise InvalidOptions(f"task must be 'transcribe' or 'translate', not {self.task!r}")
        if not isinstance(self.beam_size, int) or self.beam_size < 1:
            raise InvalidOptions(f"beam_size must be a positive integer, got {self.beam_size!r}")
        if not isinstance(self.best_of, int) or self.best_of < 1:
            raise InvalidOptions(f"best_of must be a positive integer, got {self.best_of!r}")
        if not self.temperatures or any(t < 0 for t in self.temperatures):
            raise InvalidOptions(f"temperatures must be one or more values >= 0, got {self.temperatures!r}")


@attrs.frozen
class Segment:
    id: int
    seek: int  # mel frame of the window it came from
    start: float  # seconds
    end: float
    text: str
    tokens: tuple[int, ...]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float

    def to_json(self) -> dict:
        return {
            "id": self.id, "start": round(self.start, 3), "end": round(self.end, 3), "text": self.text,
            "tokens": list(self.tokens), "temperature": self.temperature, "avg_logprob": self.avg_logprob,
            "compression_ratio": self.compression_ratio, "no_speech_prob": self.no_speech_prob,
        }  # fmt: skip


def compression_ratio(text: str) -> float:
    raw = text.encode("utf-8")
    return len(raw) / len(zlib.compress(raw)) if raw else 0.0


class SpecialTokens:
    """The ids a transcription needs, from the model's metadata and tokenizer."""

    def __init__(self, model, language: str | None, task: str):
        t = model.tokens
        c = model.config
        self.eot, self.sot, self.sot_prev = t["eot"], t["sot"], t["sot_prev"]
        self.no_timestamps, self.timestamp_begin, self.no_speech = t["no_timestamps"], t["timestamp_begin"], t["no_speech"]
        self.multilingual = c.multilingual
        self.lang_by_code = dict(zip(c.languages, c.lang_ids, strict=True))
        self.tokenizer = model.tokenizer
        self.task = t[task] if self.multilingual else None
        self.set_language(language)

    def set_language(self, language: str | None) -> None:
        self.language_code = language
        self.language = None
        if self.multilingual and language is not None:
            if language not in self.lang_by_code:
                raise AudioError(
                    f"unknown language {language!r}; this model knows: {', '.join(sorted(self.lang_by_code))}"
                )
            self.language = self.lang_by_code[language]

    @property
    def sot_sequence(self) -> list[int]:
        seq = [self.sot]
        if self.language is not None:
            seq.append(self.language)
        if self.task is not None:
            seq.append(self.task)
        return seq

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special=False)

    def decode(self, tokens) -> str:
        return self.tokenizer.decode([t for t in tokens if t < self.eot])


def suppressed(special: SpecialTokens, model, ids) -> list[int]:
    if ids is None:
        ids = []
    ids = list(ids)
    if -1 in ids:
        ids = [i for i in ids if i >= 0] + non_speech_tokens(special.encode)
    t = model.tokens
    ids += [t["transcribe"], t["translate"], t["sot"], t["sot_prev"], t["sot_lm"], t["no_speech"]]
    return sorted(set(ids))


def split_segments(tokens, ts_begin: int, time_offset: float, segment_size: int, segment_duration: float, seek: int):
    """Segments of one window's tokens at pairs of timestamps, and where the next window starts."""
    out = []
    single_ending = len(tokens) >= 2 and tokens[-2] < ts_begin <= tokens[-1]
    pairs = [i for i in range(1, len(tokens)) if tokens[i] >= ts_begin and tokens[i - 1] >= ts_begin]
    if pairs:
        cuts = pairs + ([len(tokens)] if single_ending else [])
        last = 0
        for cut in cuts:
            part = tokens[last:cut]
            out.append((time_offset + (part[0] - ts_begin) * TIME_PRECISION,
                        time_offset + (part[-1] - ts_begin) * TIME_PRECISION, part))  # fmt: skip
            last = cut
        if single_ending:
            seek += segment_size
        else:  # the last segment is unfinished: start the next window at its start
            seek += (tokens[last - 1] - ts_begin) * INPUT_STRIDE
    else:
        duration = segment_duration
        stamps = [t for t in tokens if t >= ts_begin]
        if stamps and stamps[-1] != ts_begin:
            duration = (stamps[-1] - ts_begin) * TIME_PRECISION
        out.append((time_offset, time_offset + duration, list(tokens)))
        seek += segment_size
    return out, seek


class Transcription:
    """One recording's transcription in progress: iterate for segments (see `transcribe`)."""

    def __init__(self, model, samples, options: TranscribeOptions,
                 progress: Callable[[float, float], None] | None = None, cancelled: Callable[[], bool] | None = None,
                 speech: Callable[[int, int], bool] | None = None):  # fmt: skip
        """``samples``: 16 kHz PCM, or its features (`features.ArrayFeatures`,
        `features.StreamedFeatures`). ``speech(start, end)``: whether samples [start, end)
        hold speech (a voice activity detector's answer); a window without any is skipped
        undecoded, as one judged silent is."""
        from .features import ArrayFeatures

        self.model = model
        self.options = options
        self.progress = progress
        self.cancelled = cancelled or (lambda: False)
        self.speech = speech
        if isinstance(samples, np.ndarray):
            samples = ArrayFeatures(melmod.log_mel(samples, model.mel_filters), len(samples))
        self.features = samples
        self.duration = samples.n_samples / melmod.SAMPLE_RATE
        self.state = model.new_state(max(options.beam_size, options.best_of, 1))
        self.language_probability = 1.0
        lang = options.language
        if not model.config.multilingual:
            lang = "en"
        self.special = SpecialTokens(model, lang, options.task if model.config.multilingual else "transcribe")
        if lang is None:
            lang, self.language_probability, self.language_probs = detect_language(model, self.state, self.features)
            self.special.set_language(lang)
        self.language = lang
        rules = [SuppressTokens(suppressed(self.special, model, options.suppress_tokens))]
        if options.suppress_blank:
            rules.append(SuppressBlank(self.special.encode(" ") + [self.special.eot]))
        if not options.without_timestamps:
            max_initial = None
            if options.max_initial_timestamp is not None:
                max_initial = int(round(options.max_initial_timestamp / TIME_PRECISION))
            rules.append(TimestampRules(self.special.eot, self.special.no_timestamps, self.special.timestamp_begin, max_initial))
        self.decoder = WindowDecoder(model, rules, seed=options.seed)

    def _prompt(self, previous: list[int]) -> tuple[list[int], int]:
        prompt = []
        max_len = self.model.config.n_text_ctx
        if previous:
            prompt.append(self.special.sot_prev)
            prompt.extend(previous[-(max_len // 2 - 1) :])
        sot_index = len(prompt)
        prompt.extend(self.special.sot_sequence)
        if self.options.without_timestamps:
            prompt.append(self.special.no_timestamps)
        return prompt, sot_index

    def _decode_with_fallback(self, prompt, sot_index) -> tuple[DecodeResult, float]:
        o = self.options
        dopts = DecodeOptions(beam_size=o.beam_size, best_of=o.best_of, patience=o.patience,
                              length_penalty=o.length_penalty, max_length=self.model.config.n_text_ctx)  # fmt: skip
        results, below_cr = [], []
        result = None
        for temperature in o.temperatures:
            if temperature > 0:
                result = self.decoder.sample(self.state, prompt, sot_index, dopts, temperature)
            elif o.beam_size > 1:
                result = self.decoder.beam(self.state, prompt, sot_index, dopts)
            else:
                result = self.decoder.greedy(self.state, prompt, sot_index, dopts)
            ratio = compression_ratio(self.special.decode(result.tokens).strip())
            entry = (result, ratio)
            results.append(entry)
            fallback = False
            if o.compression_ratio_threshold is not None:
                if ratio > o.compression_ratio_threshold:
                    fallback = True
                else:
                    below_cr.append(entry)
            if o.log_prob_threshold is not None and result.avg_logprob < o.log_prob_threshold:
                fallback = True
            if (o.no_speech_threshold is not None and result.no_speech_prob > o.no_speech_threshold
                    and o.log_prob_threshold is not None and result.avg_logprob < o.log_prob_threshold):  # fmt: skip
                fallback = False  # silence: nothing better will come
            if not fallback:
                return entry
        best, ratio = max(below_cr or results, key=lambda e: e[0].avg_logprob)
        return attrs.evolve(best, temperature=result.temperature), ratio

    def __iter__(self) -> Iterator[Segment]:
        o = self.options
        content_frames = self.features.n_frames - 1
        seek = 0
        all_tokens: list[int] = []
        reset_since = 0
        if o.initial_prompt:
            all_tokens.extend(self.special.encode(" " + o.initial_prompt.strip()))
        idx = 0
        while seek < content_frames:
            if self.cancelled():
                raise TranscriptionCancelled(f"transcription cancelled at {seek / FRAMES_PER_SECOND:.2f} s")
            time_offset = seek * (melmod.HOP / melmod.SAMPLE_RATE)  # as faster-whisper, to the last bit
            size = min(melmod.N_FRAMES, content_frames - seek)
            if self.speech is not None and not self.speech(seek * melmod.HOP, (seek + size) * melmod.HOP):
                seek += size  # no voice in the whole window: nothing to decode
                self._progress(seek, content_frames)
                continue
            window = self.features.window(seek, size)
            self.model.encode(self.state, 0, window)
            prompt, sot_index = self._prompt(all_tokens[reset_since:])
            result, ratio = self._decode_with_fallback(prompt, sot_index)
            previous_seek = seek
            if o.no_speech_threshold is not None:
                skip = result.no_speech_prob > o.no_speech_threshold
                if o.log_prob_threshold is not None and result.avg_logprob > o.log_prob_threshold:
                    skip = False
                if skip:
                    seek += size
                    self._progress(seek, content_frames)
                    continue
            parts, seek = split_segments(list(result.tokens), self.special.timestamp_begin, time_offset, size,
                                         size * (melmod.HOP / melmod.SAMPLE_RATE), seek)  # fmt: skip
            for start, end, toks in parts:
                text = self.special.decode(toks)
                if start == end or not text.strip():
                    continue
                all_tokens.extend(toks)
                idx += 1
                yield Segment(idx, previous_seek, start, end, text, tuple(toks), result.temperature,
                              result.avg_logprob, ratio, result.no_speech_prob)  # fmt: skip
            if not o.condition_on_previous_text or result.temperature > o.prompt_reset_on_temperature:
                reset_since = len(all_tokens)
            self._progress(seek, content_frames)

    def _progress(self, seek: int, total: int) -> None:
        if self.progress:
            self.progress(min(seek, total) / FRAMES_PER_SECOND, total / FRAMES_PER_SECOND)


def detect_language(model, state, features: np.ndarray) -> tuple[str, float, list[tuple[str, float]]]:
    """The language of the first window: the decoder's distribution over the language
    tokens after the start token, as Whisper detects it."""
    c = model.config
    if not c.multilingual:
        return "en", 1.0, [("en", 1.0)]
    from cera.generation.runtime import SeqStep

    from .decode import LOGITS, kv_reset

    if isinstance(features, np.ndarray):  # features [n_mels, frames]
        from .features import ArrayFeatures

        features = ArrayFeatures(features, features.shape[-1] * melmod.HOP)
    window = features.window(0, min(melmod.N_FRAMES, features.n_frames))
    model.encode(state, 0, window)
    kv_reset(state, 0)
    logits = model.dec_runner.forward(state, [SeqStep(0, [model.tokens["sot"]], [0])], LOGITS)["logits"][0]
    ids = np.asarray(c.lang_ids)
    x = logits[ids].astype(np.float64)
    p = np.exp(x - x.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    probs = [(c.languages[i], float(p[i])) for i in order]
    return probs[0][0], probs[0][1], probs
