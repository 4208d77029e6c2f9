"""The GE2E speaker encoder on cera's ops against resemblyzer 0.1.4 (stored outputs of the
peer on the same inputs: data/make_reference.py)."""

from __future__ import annotations

import numpy as np
import pytest
from diar_cases import CONVERSATIONS, DATA

from cera_audio_diarizer.convert import mel_filters
from cera_audio_diarizer.der import read_rttm
from cera_audio_diarizer.diarizer import raise_volume
from cera_audio_diarizer.encoder import partial_slices


def test_mel_filters_equal_librosa(reference):
    np.testing.assert_allclose(mel_filters(), reference["mel_filters"], rtol=1e-5, atol=1e-9)


def test_mel_spectrogram_equals_resemblyzer(encoder, reference, conversations):
    x = conversations["two_voices"][: 3 * 16000]
    got = encoder.mel(x)
    want = reference["mel"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6 * float(want.max()))


def test_partial_embeddings_equal_resemblyzer(encoder, reference):
    got = encoder.embed_partials(reference["partials_mel"])
    want = reference["partials_embed"]
    assert got.shape == want.shape == (5, 256)
    # measured: 3.7e-7 at most (float32 LSTM on cera's CPU backend against torch's)
    assert float(np.abs(got - want).max()) < 1e-5
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_batching_does_not_change_embeddings(encoder, reference):
    mels = reference["partials_mel"]
    one_by_one = np.concatenate([encoder.embed_partials(mels[i : i + 1]) for i in range(len(mels))])
    np.testing.assert_allclose(encoder.embed_partials(mels), one_by_one, atol=1e-6)


@pytest.mark.parametrize("name", CONVERSATIONS)
def test_utterance_embeddings_equal_resemblyzer(encoder, reference, conversations, name):
    wav = conversations[name]
    for k, t in enumerate(read_rttm(DATA / f"{name}.rttm")):
        piece = raise_volume(wav[int(round(t.start * 16000)) : int(round(t.end * 16000))])
        got = encoder.embed_utterance(piece)
        want = reference[f"{name}/turn{k}"]
        assert float(np.abs(got - want).max()) < 1e-5, (name, k)


def test_partial_slices_as_resemblyzer():
    # resemblyzer.VoiceEncoder.compute_partial_slices(n)[1] for these lengths, in mel frames
    # (10 ms; windows of 160 frames, a step of 77 at 1.3 windows per second)
    assert partial_slices(16000) == [(0, 160)]
    assert partial_slices(3 * 16000) == [(0, 160), (77, 237), (154, 314)]
    # 2.5 s: the third window would be less than 75% audio: dropped
    assert partial_slices(40000) == [(0, 160), (77, 237)]
