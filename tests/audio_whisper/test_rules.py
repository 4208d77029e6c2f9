"""Whisper's decoding rules (processors of the sampling chain) and segment splitting,
on hand-made logits whose right answers are worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
from cera_audio_whisper.rules import SuppressBlank, SuppressTokens, TimestampRules, non_speech_tokens
from cera_audio_whisper.transcribe import compression_ratio, split_segments

from cera.generation.sampling import Candidates

EOT, NO_TS, TS = 10, 11, 12  # a vocabulary of 10 text tokens, end, no-timestamps, 8 timestamps
V = 20


def masked(proc, logits, history):
    c = Candidates(np.asarray(logits, np.float32).copy())
    proc.apply(c, history)
    return c.logits


def allowed(x):
    return [i for i in range(V) if np.isfinite(x[i])]


def rules(max_initial=None):
    return TimestampRules(EOT, NO_TS, TS, max_initial)


def test_first_token_is_a_timestamp_within_max_initial():
    x = masked(rules(max_initial=2), np.zeros(V), [])
    assert allowed(x) == [TS, TS + 1, TS + 2]


def test_timestamps_pair_then_text():
    # text, then a timestamp (a segment's end): another timestamp or the end, no text
    logits = np.zeros(V)
    logits[EOT] = 5.0  # likelier than the timestamps together, so the end stays allowed
    x = masked(rules(), logits, [TS, 3, TS + 2])
    assert set(allowed(x)) == {EOT} | set(range(TS + 2, V))
    # two timestamps in a row: no timestamp next
    x = masked(rules(), np.zeros(V), [TS, 3, TS + 2, TS + 2])
    assert max(allowed(x)) < NO_TS and NO_TS not in allowed(x)


def test_timestamps_never_go_back():
    # after text, a new timestamp must be later than the last one (segments have length)
    x = masked(rules(), np.zeros(V), [TS, 3, TS + 4, TS + 4, 5])
    assert [t for t in allowed(x) if t >= TS] == list(range(TS + 5, V))


def test_probable_timestamps_win_over_text():
    logits = np.full(V, -5.0)
    logits[3] = 1.0  # the likeliest single token is text ...
    logits[TS + 2 :] = 0.8  # ... but the timestamps together are likelier
    x = masked(rules(), logits, [TS, 4])
    assert min(allowed(x)) >= TS
    logits[TS + 2 :] = -3.0  # now they are not
    assert 3 in allowed(masked(rules(), logits, [TS, 4]))


def test_suppress_tokens_and_blank():
    assert allowed(masked(SuppressTokens([1, 2]), np.zeros(V), [5])) == [0] + list(range(3, V))
    blank = SuppressBlank([7, EOT])
    assert 7 not in allowed(masked(blank, np.zeros(V), [])) and EOT not in allowed(masked(blank, np.zeros(V), []))
    assert allowed(masked(blank, np.zeros(V), [3])) == list(range(V))


def test_non_speech_tokens_takes_single_token_symbols():
    table = {" -": [1], " '": [2], "#": [3], " #": [4, 5], "♪": [6, 7]}
    ids = non_speech_tokens(lambda t: table.get(t, [100, 101]))
    # music notes: the first token of either form, even when split; other symbols only whole
    assert {1, 2, 3, 6} <= set(ids) and 4 not in ids and 5 not in ids and 7 not in ids and 101 not in ids


def test_split_segments_at_timestamp_pairs():
    toks = [TS, 1, 2, TS + 3, TS + 3, 4, TS + 6]  # two closed segments, ending on one timestamp
    parts, seek = split_segments(toks, TS, 10.0, 3000, 30.0, 1000)
    assert [(s, e) for s, e, _ in parts] == [(10.0, pytest.approx(10.06)), (pytest.approx(10.06), pytest.approx(10.12))]
    assert seek == 1000 + 3000  # a single timestamp at the end: the window is done
    toks = [TS, 1, TS + 3, TS + 3, 4]  # the second segment is unfinished: seek to its start
    parts, seek = split_segments(toks, TS, 0.0, 3000, 30.0, 0)
    assert len(parts) == 1 and seek == 3 * 2
    parts, seek = split_segments([1, 2], TS, 5.0, 700, 7.0, 500)  # no timestamps at all
    assert parts == [(5.0, 12.0, [1, 2])] and seek == 1200


def test_compression_ratio_flags_repetition():
    assert compression_ratio("the cat sat on the mat") < 2.4
    assert compression_ratio("la " * 100) > 2.4
