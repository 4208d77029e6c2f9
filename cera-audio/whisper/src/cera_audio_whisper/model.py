"""Whisper's encoder and decoder as cera graphs, bound to a backend.

Two `cera.model.Model`s share one file's weights and one state declaration:

- `WhisperEncoder`: log-mel frames ``[3000, n_mels]`` (graph input "mel") -> two
  convolutions (the second strided by 2) with GELU -> sinusoidal positions -> pre-norm
  transformer layers with bidirectional attention -> final norm -> per decoder layer the
  cross-attention keys and values, stored into each sequence's `CrossKV` memory
  (`store_cross`). It returns nothing: its product is state.
- `WhisperDecoder`: token and learned position embeddings -> per layer causal
  self-attention over a KV cache, cross-attention over the memory, an MLP -> final norm ->
  logits through the token embedding (tied).

`WhisperModel` loads both from a GGUF file made by `cera convert whisper`, picks a
backend (the CPU backend's C plans by default), uploads the weights once, and keeps a
`cera.generation.runtime.Runner` per graph family. States hold ``n_slots`` sequences (beams).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import attrs
import numpy as np

from cera.backend import StepInputs
from cera.errors import ModelConfigError
from cera.graph.builder import GraphBuilder, Layout, Outputs
from cera.model import Model, Weights
from cera.graph.ops import AttentionSpec
from cera.state import AttentionKV, CrossKV, StateSpec

ARCH = "whisper"
MEL_INPUT = "mel"


@attrs.frozen
class WhisperConfig:
    n_mels: int
    n_audio_ctx: int
    n_text_ctx: int
    d: int
    n_ff: int
    enc_layers: int
    enc_heads: int
    dec_layers: int
    dec_heads: int
    eps: float
    n_vocab: int
    multilingual: bool
    lang_ids: tuple[int, ...]
    languages: tuple[str, ...]
    suppress_ids: tuple[int, ...]
    suppress_ids_begin: tuple[int, ...]
    tokens: dict  # name -> id: eot, sot, sot_prev, sot_lm, no_timestamps, transcribe, translate, no_speech, timestamp_begin
    sample_rate: int = 16000
    n_fft: int = 400
    hop: int = 160

    @property
    def n_frames(self) -> int:
        """Mel frames of one window: the encoder's convolutions halve them to n_audio_ctx."""
        return 2 * self.n_audio_ctx


_KNOWN_KEYS = {
    "converter_version", "n_mels", "sample_rate", "n_fft", "hop_length", "encoder.context_length",
    "encoder.block_count", "encoder.attention.head_count", "decoder.context_length", "decoder.block_count",
    "decoder.attention.head_count", "embedding_length", "feed_forward_length", "attention.layer_norm_epsilon",
    "multilingual", "lang_ids", "languages", "suppress_ids", "suppress_ids_begin", "alignment_heads",
}  # fmt: skip


def read_config(gguf) -> WhisperConfig:
    path = getattr(gguf, "path", "the model file")
    if gguf.architecture != ARCH:
        raise ModelConfigError(f"{path}: architecture {gguf.architecture!r}, not {ARCH!r}")
    md = gguf.metadata

    def get(suffix, kind=int):
        key = f"{ARCH}.{suffix}"
        if key not in md:
            raise ModelConfigError(f"{path}: Whisper needs metadata key {key!r}; convert the model again with `cera convert whisper`")
        v = md[key]
        if kind is int and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
            raise ModelConfigError(f"{path}: {key} should be an integer, got {v!r}")
        return kind(v) if kind in (int, float, bool) else v

    for key in md:
        if key.startswith(f"{ARCH}.") and not key.startswith(f"{ARCH}.token."):
            if key[len(ARCH) + 1 :] not in _KNOWN_KEYS:
                raise ModelConfigError(f"{path}: unknown Whisper key {key!r}; the file is from a newer converter")
    tokens = {k[len(ARCH) + 7 :]: int(v) for k, v in md.items() if k.startswith(f"{ARCH}.token.")}
    for need in ("eot", "sot", "sot_prev", "sot_lm", "no_timestamps", "transcribe", "translate", "no_speech", "timestamp_begin"):
        if need not in tokens:
            raise ModelConfigError(f"{path}: metadata key {ARCH}.token.{need} is missing")
    cfg = WhisperConfig(
        n_mels=get("n_mels"), n_audio_ctx=get("encoder.context_length"), n_text_ctx=get("decoder.context_length"),
        d=get("embedding_length"), n_ff=get("feed_forward_length"), enc_layers=get("encoder.block_count"),
        enc_heads=get("encoder.attention.head_count"), dec_layers=get("decoder.block_count"),
        dec_heads=get("decoder.attention.head_count"), eps=get("attention.layer_norm_epsilon", float),
        n_vocab=len(md.get("tokenizer.ggml.tokens", [])), multilingual=get("multilingual", bool),
        lang_ids=tuple(int(i) for i in get("lang_ids", list)), languages=tuple(get("languages", list)),
        suppress_ids=tuple(int(i) for i in get("suppress_ids", list)),
        suppress_ids_begin=tuple(int(i) for i in get("suppress_ids_begin", list)), tokens=tokens,
        sample_rate=get("sample_rate"), n_fft=get("n_fft"), hop=get("hop_length"),
    )  # fmt: skip
    if cfg.sample_rate != 16000 or cfg.n_fft != 400 or cfg.hop != 160:
        raise ModelConfigError(f"{path}: a front end of {cfg.sample_rate} Hz / {cfg.n_fft} / {cfg.hop}; Whisper's is 16000 / 400 / 160")
    if cfg.d % cfg.enc_heads or cfg.d % cfg.dec_heads:
        raise ModelConfigError(f"{path}: width {cfg.d} is not a multiple of the head counts")
    return cfg


def declare_state(cfg: WhisperConfig) -> tuple[StateSpec, list, list]:
    """Per decoder layer: its self-attention cache and its cross-attention memory."""
    spec = StateSpec()
    dh = cfg.d // cfg.dec_heads
    kv, cross = [], []
    for _ in range(cfg.dec_layers):
        kv.append(spec.add(AttentionKV(cfg.dec_heads, dh, dh)))
        cross.append(spec.add(CrossKV(cfg.dec_heads, dh, dh, cfg.n_audio_ctx)))
    return spec, kv, cross


class _Whisper(Model):
    family = ARCH

    def __init__(self, config: WhisperConfig, weights: Weights, state: tuple):
        super().__init__(config, weights)
        self.state, self.kv_refs, self.cross_refs = state

    @classmethod
    def read_config(cls, gguf) -> WhisperConfig:
        return read_config(gguf)

    def _norm(self, g, x, prefix):
        w = self.weights
        return g.layer_norm(x, w[f"{prefix}.weight"], w[f"{prefix}.bias"], eps=self.config.eps)

    def _linear(self, g, x, prefix, bias=True):
        w = self.weights
        return g.linear(x, w[f"{prefix}.weight"], w[f"{prefix}.bias"] if bias else None)

    def _mlp(self, g, x, p):
        h = self._norm(g, x, f"{p}.ffn_norm")
        h = g.unary("gelu_erf", self._linear(g, h, f"{p}.ffn_up"))
        return g.add(x, self._linear(g, h, f"{p}.ffn_down"))


class WhisperEncoder(_Whisper):
    """The encoder pass: mel frames in, each decoder layer's cross memory stored."""

    @property
    def n_vocab(self) -> int:
        return 0

    def forward(self, g: GraphBuilder) -> None:
        c = self.config
        w = self.weights
        n = g.layout.n_tokens
        if g.layout.n_seq != 1 or n != c.n_audio_ctx:
            raise ModelConfigError(f"the Whisper encoder runs one window of {c.n_audio_ctx} positions at a time")
        heads, dh = c.enc_heads, c.d // c.enc_heads
        x = g.input(MEL_INPUT, (c.n_frames, c.n_mels))
        x = g.unary("gelu_erf", g.conv1d(x, w["enc.conv1.weight"], w["enc.conv1.bias"], stride=1, padding=1))
        x = g.unary("gelu_erf", g.conv1d(x, w["enc.conv2.weight"], w["enc.conv2.bias"], stride=2, padding=1))
        x = g.add(x, g.embedding(w["enc.position_embd.weight"], g.positions))
        spec = AttentionSpec(scale=1.0 / math.sqrt(dh), causal=False)
        for i in range(c.enc_layers):
            p = f"enc.blk.{i}"
            h = self._norm(g, x, f"{p}.attn_norm")
            q = g.reshape(self._linear(g, h, f"{p}.attn_q"), (n, heads, dh))
            k = g.reshape(self._linear(g, h, f"{p}.attn_k", bias=False), (n, heads, dh))
            v = g.reshape(self._linear(g, h, f"{p}.attn_v"), (n, heads, dh))
            a = g.attention_full(q, k, v, spec)
            x = g.add(x, self._linear(g, a, f"{p}.attn_out"))
            x = self._mlp(g, x, p)
        x = self._norm(g, x, "enc.output_norm")
        dd = c.d // c.dec_heads
        for i, ref in enumerate(self.cross_refs):
            p = f"dec.blk.{i}"
            k = g.reshape(self._linear(g, x, f"{p}.cross_attn_k", bias=False), (n, c.dec_heads, dd))
            v = g.reshape(self._linear(g, x, f"{p}.cross_attn_v"), (n, c.dec_heads, dd))
            g.store_cross(k, v, ref)


class WhisperDecoder(_Whisper):
    """One decoder pass over new tokens of each sequence (its slot's cache and memory)."""

    @property
    def n_vocab(self) -> int:
        return self.config.n_vocab

    @property
    def n_ctx_train(self) -> int:
        return self.config.n_text_ctx

    def forward(self, g: GraphBuilder) -> None:
        c = self.config
        w = self.weights
        n = g.layout.n_tokens
        heads, dh = c.dec_heads, c.d // c.dec_heads
        x = g.add(g.embedding(w["dec.token_embd.weight"], g.tokens), g.embedding(w["dec.position_embd.weight"], g.positions))
        spec = AttentionSpec(scale=1.0 / math.sqrt(dh))
        for i in range(c.dec_layers):
            p = f"dec.blk.{i}"
            h = self._norm(g, x, f"{p}.attn_norm")
            q = g.reshape(self._linear(g, h, f"{p}.attn_q"), (n, heads, dh))
            k = g.reshape(self._linear(g, h, f"{p}.attn_k", bias=False), (n, heads, dh))
            v = g.reshape(self._linear(g, h, f"{p}.attn_v"), (n, heads, dh))
            a = g.attention(q, k, v, self.kv_refs[i], spec)
            x = g.add(x, self._linear(g, a, f"{p}.attn_out"))
            h = self._norm(g, x, f"{p}.cross_attn_norm")
            q = g.reshape(self._linear(g, h, f"{p}.cross_attn_q"), (n, heads, dh))
            # several sequences in one pass are hypotheses (beams, samples) of one window:
            # they read the memory of the first one's slot instead of copies of it
            a = g.cross_attention(q, self.cross_refs[i], spec, shared=g.layout.n_seq > 1)
            x = g.add(x, self._linear(g, a, f"{p}.cross_attn_out"))
            x = self._mlp(g, x, p)
        x = g.output_rows(x)
        x = self._norm(g, x, "dec.output_norm")
        g.emit_hidden(x)
        if g.wants_logits:
            g.emit_logits(g.linear(x, w["dec.token_embd.weight"]))


def _choose_backend(gguf, device: str, manager, ops: set, threads: int | None):
    """The backend to run on: the one named, or under "auto" the highest-priority one that
    can run here, takes the options and implements every op of both graphs (as
    cera.engine.choose_backend picks one for any model: an emulated GPU only by name)."""
    from cera.engine import choose_backend

    options = {"threads": threads} if threads is not None else {}
    return choose_backend(gguf, device, manager, ops=ops, **options)


class WhisperModel:
    """A Whisper GGUF bound to a backend: encode windows, decode tokens, per state slot."""

    def __init__(self, path: str | os.PathLike, device: str = "auto", threads: int | None = None, manager=None):
        from cera.formats.gguf import GGUFFile
        from cera.plugins.manager import get_manager
        from cera.generation.runtime import Runner
        from cera.text.tokenizer import Tokenizer

        self.path = Path(path)
        self.gguf = GGUFFile(self.path)
        try:
            self.config = read_config(self.gguf)
            weights = Weights.from_gguf(self.gguf)
            state = declare_state(self.config)
            self.encoder = WhisperEncoder(self.config, weights, state)
            self.decoder = WhisperDecoder(self.config, weights, state)
            # every tensor is asked for by one of the two graphs (or the front end)
            self.encoder.build(Layout((self.config.n_audio_ctx,)), Outputs())
            self.decoder.build(Layout((1,)), Outputs(("logits",)))
            self.mel_filters = weights.host("mel_filters")
            weights.check_all_used(ARCH)
            manager = manager or get_manager()
            ops = self.encoder.build(Layout((self.config.n_audio_ctx,)), Outputs()).ops_used()
            ops |= self.decoder.build(Layout((2,)), Outputs(("logits",))).ops_used()
            self.backend, self.backend_notes = _choose_backend(self.gguf, device, manager, ops, threads)
            uploaded = {name: self.backend.upload(self.gguf, name) for name in sorted(weights.used) if name != "mel_filters"}
            self.enc_runner = Runner(self.encoder, self.backend, uploaded)
            self.dec_runner = Runner(self.decoder, self.backend, uploaded)
            self.tokenizer = Tokenizer.from_gguf(self.gguf)
        except BaseException:
            self.gguf.close()
            raise

    @property
    def tokens(self) -> dict:
        return self.config.tokens

    def new_state(self, n_slots: int = 1):
        """Storage for ``n_slots`` sequences: float32 caches (as faster-whisper's float32 compute)."""
        c = self.config
        return self.dec_runner.new_state(c.n_text_ctx, n_slots=n_slots, kv_type="f32", n_batch=c.n_text_ctx)

    def encode(self, state, slot: int, mel_window: np.ndarray) -> None:
        """Run the encoder on one window ``[n_frames, n_mels]`` and store its memory in ``slot``."""
        c = self.config
        layout = Layout((c.n_audio_ctx,))
        exe = self.enc_runner.executable(layout, Outputs(), state)
        inputs = StepInputs(
            tokens=np.zeros(c.n_audio_ctx, np.int32),
            positions=np.arange(c.n_audio_ctx, dtype=np.int32),
            slots=np.array([slot], np.int32),
            starts=np.zeros(1, np.int32),
            extra={MEL_INPUT: np.ascontiguousarray(mel_window, np.float32)},
        )
        exe.run(state, inputs)

    def close(self) -> None:
        self.backend.close()
        self.gguf.close()
