"""The AudioPipeline's rules on deterministic components (fakes.py): utterance boundaries,
pre-roll, the wake word, utterance splitting, cancellation and speaker labels, against
boundaries known by construction."""

from __future__ import annotations

import time

import numpy as np
import pytest
from pipeline_fakes import RATE, EnergyVAD, Reporter, ScriptedDiarizer, ScriptedKWS, SpeakerTurn, describe, silence, tone

from cera.audio import (AudioPipeline, Hotword, PipelineParams, PipelineState, SpeechEnd, SpeechStart, Transcript,
                        TranscriptCancelled)  # fmt: skip
from cera.errors import AudioError

F = 512  # the energy VAD's frame


def run(pipeline, audio, chunk=1000):
    events = []
    for at in range(0, len(audio), chunk):
        events += pipeline.push(audio[at : at + chunk])
    return events + pipeline.flush()


def of(events, kind):
    return [e for e in events if isinstance(e, kind)]


def test_every_utterance_without_a_wake_word():
    audio = np.concatenate([silence(1.0), tone(1.5), silence(1.0), tone(1.0), silence(1.0)])
    tr = Reporter()
    with AudioPipeline(EnergyVAD(), tr, wait=True) as p:
        events = run(p, audio)
    starts, ends, texts = of(events, SpeechStart), of(events, SpeechEnd), of(events, Transcript)
    assert len(starts) == len(ends) == len(texts) == 2
    # onset at 1.0 s: the frame holding it opens the utterance, 300 ms of pre-roll before it
    assert starts[0].time == pytest.approx(((RATE // F) * F - 0.3 * RATE) / RATE)
    # the tone ends at 2.5 s (sample 40000): frame [39936, 40448) still holds 64 samples of it
    # (probability 0.75), the next is the first silent one; 200 ms of the silence are kept
    assert ends[0].time == pytest.approx((40448 + 0.2 * RATE) / RATE)
    # the transcriber got exactly the utterance's audio
    first = int(round(starts[0].time * RATE))
    assert texts[0].text == describe(audio[first : int(round(ends[0].time * RATE))])
    assert (texts[0].start, texts[0].end) == (starts[0].time, ends[0].time)
    assert texts[1].start > texts[0].end and texts[1].text.startswith("n=")


def test_pre_roll_keeps_the_onset():
    audio = np.concatenate([silence(1.0), tone(1.0), silence(1.0)])
    got = {}
    for pre in (0, 300):
        with AudioPipeline(EnergyVAD(), Reporter(), params=PipelineParams(pre_roll_ms=pre), wait=True) as p:
            got[pre] = of(run(p, audio), SpeechStart)[0].time
    assert got[0] == pytest.approx((RATE // F) * F / RATE)  # the VAD frame's own start
    assert got[300] == pytest.approx(got[0] - 0.3) and got[300] < 1.0


def test_only_what_follows_the_wake_word():
    audio = np.concatenate([
        silence(1.0), tone(1.0),  # 1-2 s: before the wake word
        silence(1.0),  # wake word detected at 3.0 s
        silence(0.1), tone(1.0),  # 3.1-4.1 s: the command
        silence(1.9), tone(1.0),  # 6-7 s: after the command, no wake word
        silence(1.0),  # wake word at 8.0 s, then no speech for 3 s
        silence(3.0), tone(1.0), silence(1.0),  # 11-12 s: too late
    ])  # fmt: skip
    kws = ScriptedKWS([3.0, 8.0])
    params = PipelineParams(listen_timeout_ms=2000)
    states = []
    with AudioPipeline(EnergyVAD(), Reporter(), kws=kws, params=params, wait=True) as p:
        events = []
        for at in range(0, len(audio), 1600):
            events += p.push(audio[at : at + 1600])
            states.append(((at + 1600) / RATE, p.state))
        events += p.flush()
    assert [e.time for e in of(events, Hotword)] == [3.0, 8.0]
    texts = of(events, Transcript)
    assert len(texts) == 1
    # the pre-roll stops at the wake word's detection
    assert texts[0].start == pytest.approx(3.0) and 4.1 < texts[0].end < 4.6
    assert [type(e).__name__ for e in events] == ["Hotword", "SpeechStart", "SpeechEnd", "Transcript", "Hotword"]
    def state_at(t):
        return next(s for at, s in states if at >= t)
    assert state_at(2.0) is PipelineState.LISTENING_FOR_HOTWORD
    assert state_at(3.05) is PipelineState.LISTENING_FOR_SPEECH
    assert state_at(3.9) is PipelineState.SPEECH_ACTIVE
    assert state_at(6.5) is PipelineState.LISTENING_FOR_HOTWORD
    assert state_at(9.0) is PipelineState.LISTENING_FOR_SPEECH
    assert state_at(10.3) is PipelineState.LISTENING_FOR_HOTWORD


def test_long_speech_is_split_at_its_quietest_frame_without_resetting_the_vad():
    dip = (4.5, 4.6)  # quieter (probability 0.42: neither speech nor silence)
    audio = np.concatenate([silence(0.5), tone(dip[0] - 0.5), tone(dip[1] - dip[0], 0.06), tone(12.0 - dip[1]),
                            silence(1.0)])  # fmt: skip
    vad, tr = EnergyVAD(), Reporter()
    params = PipelineParams(max_utterance_ms=5000, split_search_ms=1000, pre_roll_ms=0)
    with AudioPipeline(vad, tr, params=params, wait=True) as p:
        resets = vad.resets
        events = run(p, audio)
        assert vad.resets == resets  # one recurrent state across the cuts
    texts = of(events, Transcript)
    assert len(texts) == 3
    for a, b in zip(texts, texts[1:]):
        assert a.end == b.start  # contiguous: nothing lost at a cut
    assert all(t.end - t.start <= 5.0 + 1e-9 for t in texts)
    assert dip[0] <= texts[0].end <= dip[1]  # the first cut falls in the dip
    assert sum(len(c) for c in tr.calls) == int(round((texts[-1].end - texts[0].start) * RATE))
    kinds = [type(e).__name__ for e in events if not isinstance(e, Transcript)]
    assert kinds == ["SpeechStart", "SpeechEnd", "SpeechStart", "SpeechEnd", "SpeechStart", "SpeechEnd"]


def test_cancel_is_wait_free_and_the_stream_goes_on():
    audio = np.concatenate([silence(0.5), tone(1.0), silence(1.0)])
    tr = Reporter(block_first=True)
    p = AudioPipeline(EnergyVAD(), tr)  # push never waits for the transcriber
    try:
        events = []
        for at in range(0, len(audio), 1000):
            events += p.push(audio[at : at + 1000])
        assert tr.started.wait(10)
        assert p.state is PipelineState.TRANSCRIBING
        t0 = time.perf_counter()
        assert p.cancel() is True
        assert time.perf_counter() - t0 < 0.05
        events += run(p, np.concatenate([tone(1.0), silence(1.0)]))
    finally:
        p.close()
    assert len(of(events, TranscriptCancelled)) == 1 and len(of(events, Transcript)) == 1
    c, t = of(events, TranscriptCancelled)[0], of(events, Transcript)[0]
    assert c.end < t.start and t.start > 2.0 and c.to_json()["event"] == "cancelled"
    assert p.cancel() is False  # nothing runs now


def test_transcripts_wait_for_the_diarizer_and_carry_its_speaker():
    audio = np.concatenate([silence(0.5), tone(1.0), silence(1.0), tone(1.0), silence(3.0)])
    turns = [SpeakerTurn(0.45, 1.55, 0), SpeakerTurn(2.45, 3.55, 1)]
    d = ScriptedDiarizer(turns, lag=2.0)
    with AudioPipeline(EnergyVAD(), Reporter(), diarizer=d, wait=True) as p:
        seen = []  # (audio pushed, transcript)
        for at in range(0, len(audio), 1600):
            for e in p.push(audio[at : at + 1600]):
                if isinstance(e, Transcript):
                    seen.append(((at + 1600) / RATE, e))
        seen += [(None, e) for e in p.flush() if isinstance(e, Transcript)]
    assert [e.speaker for _, e in seen] == ["SPEAKER_00", "SPEAKER_01"]
    for pushed, e in seen:
        assert pushed is None or pushed - 2.0 >= e.end  # only once the diarizer covered it
    assert seen[0][1].to_json()["speaker"] == "SPEAKER_00"


def test_bad_components_and_params():
    class Rate8k(Reporter):
        sample_rate = 8000

    with pytest.raises(AudioError, match="transcriber runs at 8000 Hz and the VAD at 16000 Hz"):
        AudioPipeline(EnergyVAD(), Rate8k())
    with pytest.raises(AudioError, match="is not a voice activity detector"):
        AudioPipeline(object(), Reporter())
    with pytest.raises(AudioError, match="is not a transcriber"):
        AudioPipeline(EnergyVAD(), object())
    with pytest.raises(AudioError, match="max_utterance_ms 500"):
        PipelineParams(max_utterance_ms=500)
    with pytest.raises(AudioError, match="pre_roll_ms must be"):
        PipelineParams(pre_roll_ms=-1)
    with AudioPipeline(EnergyVAD(), Reporter()) as p:
        with pytest.raises(AudioError, match="int16 samples"):
            p.push(np.zeros(100, np.int16))
        p.flush()
        with pytest.raises(AudioError, match="flushed; call reset"):
            p.push(np.zeros(100, np.float32))


def test_a_transcriber_error_is_raised_not_swallowed():
    audio = np.concatenate([silence(0.5), tone(1.0), silence(1.0)])
    with AudioPipeline(EnergyVAD(), Reporter(fail=True), wait=True) as p:
        with pytest.raises(RuntimeError, match="the model broke"):
            run(p, audio)
