"""The DER tool against hand-computed cases (md-eval's definitions: collar around every
reference boundary, optimal one-to-one speaker mapping, overlap counted per speaker)."""

from __future__ import annotations

import pytest

from cera_audio_diarizer.der import RTTMError, Turn, der, read_rttm

REF = [Turn(0.0, 10.0, "A"), Turn(10.0, 20.0, "B")]


def test_perfect_and_relabelled_hypotheses_score_zero():
    assert der(REF, REF).der == 0.0
    r = der(REF, [Turn(0.0, 10.0, "x"), Turn(10.0, 20.0, "y")])
    assert r.der == 0.0 and r.mapping == {"x": "A", "y": "B"}


def test_confusion_missed_and_false_alarm_without_collar():
    # one speaker for everything: B's 10 s are confused
    r = der(REF, [Turn(0.0, 20.0, "x")], collar=0.0)
    assert r.confusion == pytest.approx(10.0) and r.missed == 0 and r.false_alarm == 0
    assert r.der == pytest.approx(0.5)
    # B missing, 5 s of speech where there is none
    r = der(REF, [Turn(0.0, 10.0, "x"), Turn(20.0, 25.0, "x")], collar=0.0)
    assert r.missed == pytest.approx(10.0) and r.false_alarm == pytest.approx(5.0)
    assert r.der == pytest.approx(15.0 / 20.0)


def test_collar_removes_time_around_reference_boundaries():
    hyp = [Turn(0.0, 10.2, "x"), Turn(10.2, 20.0, "y")]  # the change 0.2 s late
    assert der(REF, hyp, collar=0.0).der == pytest.approx(0.2 / 20.0, abs=1e-6)
    r = der(REF, hyp, collar=0.25)
    # scored: 20 s less 0.25 s at 0 and 20, 0.5 s at 10
    assert r.der == 0.0 and r.scored == pytest.approx(19.0, abs=1e-6)


def test_overlap_counts_per_speaker():
    ref = [Turn(0.0, 10.0, "A"), Turn(5.0, 10.0, "B")]
    r = der(ref, [Turn(0.0, 10.0, "x")], collar=0.0)
    assert r.scored == pytest.approx(15.0) and r.missed == pytest.approx(5.0) and r.der == pytest.approx(5 / 15)


def test_read_rttm_and_its_errors(tmp_path):
    p = tmp_path / "a.rttm"
    p.write_text("SPEAKER f 1 0.500 2.000 <NA> <NA> A <NA> <NA>\n;; comment\n\nSPEAKER f 1 3.0 1.0 <NA> <NA> B <NA> <NA>\n")
    assert read_rttm(p) == [Turn(0.5, 2.5, "A"), Turn(3.0, 4.0, "B")]
    p.write_text("SPEAKER f 1 zero 1.0 <NA> <NA> B <NA> <NA>\n")
    with pytest.raises(RTTMError, match=r"a.rttm:1: onset 'zero'"):
        read_rttm(p)
    p.write_text("SPEAKER f 1 1.0\n")
    with pytest.raises(RTTMError, match="at least 8 fields"):
        read_rttm(p)
    with pytest.raises(RTTMError, match="cannot read"):
        read_rttm(tmp_path / "missing.rttm")
