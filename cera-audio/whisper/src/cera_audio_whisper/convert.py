"""`cera convert whisper`: a CTranslate2 Whisper folder to a self-describing GGUF file.

The GGUF holds everything cera needs and nothing else: the hyperparameters, the
tokenizer (byte-level BPE tokens and merges, the special and timestamp tokens), the
language tokens, the suppressed tokens of the model's generation config, the mel
filterbank (computed as Whisper's, `cera_audio_whisper.mel`) and the weights. The fused
projections of CTranslate2 (self-attention q|k|v, cross-attention k|v) are split into
one tensor each, and the key bias (all zeros: Whisper's keys have none) is dropped.

Weight types: the source's float16 as is (default), float32, or the 2-D matrices
quantized to Q8_0, Q5_0 or Q4_0 (norms, biases, position tables and the convolutions stay
float); the same source gives the same bytes every time (no time stamps, fixed order).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from cera.formats.gguf_write import write_filled_writer

from .ct2 import Ct2Model, SourceModelError, read_json
from .mel import HOP, N_FFT, SAMPLE_RATE, mel_filterbank

ARCH = "whisper"
CONVERTER_VERSION = 1
from .formats import OUT_TYPES  # noqa: E402 - the table shared with the CLI


def _gguf():
    import gguf

    return gguf


def _tokens(src: Path, n_vocab: int) -> tuple[list[str], list[int], list[str], dict[str, int]]:
    """Token strings, GGUF token types, merges and the special ids from tokenizer.json."""
    gguf = _gguf()
    doc = read_json(src / "tokenizer.json")
    model = doc.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise SourceModelError(f"{src / 'tokenizer.json'}: expected a byte-level BPE tokenizer (Whisper's), got {model.get('type')!r}")
    pieces: dict[int, str] = {int(i): s for s, i in model["vocab"].items()}
    special: dict[str, int] = {}
    for a in doc.get("added_tokens", []):
        pieces[int(a["id"])] = a["content"]
        special[a["content"]] = int(a["id"])
    if "<|notimestamps|>" not in special:
        raise SourceModelError(f"{src / 'tokenizer.json'}: no <|notimestamps|> token; not a Whisper tokenizer")
    ts_begin = special["<|notimestamps|>"] + 1
    # Timestamp tokens (0.00 to 30.00 s in steps of 0.02) are not in tokenizer.json.
    for i in range(ts_begin, n_vocab):
        pieces.setdefault(i, f"<|{(i - ts_begin) * 0.02:.2f}|>")
    missing = [i for i in range(n_vocab) if i not in pieces]
    if missing:
        raise SourceModelError(f"{src / 'tokenizer.json'}: no token for ids {missing[:5]} of the model's {n_vocab}")
    T = gguf.TokenType
    types = []
    for i in range(n_vocab):
        if i >= ts_begin:
            types.append(int(T.USER_DEFINED))
        elif pieces[i] in special:
            types.append(int(T.CONTROL))
        else:
            types.append(int(T.NORMAL))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return [pieces[i] for i in range(n_vocab)], types, merges, special


def _quantize(a: np.ndarray, out_type: str):
    gguf = _gguf()
    t = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q5_0": gguf.GGMLQuantizationType.Q5_0,
         "q4_0": gguf.GGMLQuantizationType.Q4_0}[out_type]  # fmt: skip
    return gguf.quants.quantize(np.ascontiguousarray(a, np.float32), t), t


def convert(src: str | os.PathLike, out: str | os.PathLike, out_type: str = "f16", name: str | None = None) -> Path:
    """Convert the CTranslate2 Whisper folder ``src`` to the GGUF file ``out`` (written
    atomically); returns the output path."""
    gguf = _gguf()
    src, out = Path(src), Path(out)
    if out_type not in OUT_TYPES:
        raise SourceModelError(f"unknown weight type {out_type!r}; use one of {', '.join(OUT_TYPES)}")
    if src.is_file() and src.name == "model.bin":
        src = src.parent
    if not src.is_dir():
        raise SourceModelError(
            f"{src}: not a folder; give the CTranslate2 Whisper folder (model.bin, config.json, tokenizer.json), "
            f"as faster-whisper loads it"
        )
    if not (src / "model.bin").exists():
        raise SourceModelError(f"{src}: holds no model.bin; not a CTranslate2 model folder")
    ct2 = Ct2Model(src / "model.bin")
    try:
        if ct2.spec != "WhisperSpec":
            raise SourceModelError(f"{src / 'model.bin'}: a CTranslate2 {ct2.spec}, not a Whisper model")
        config = read_json(src / "config.json")
        _write(gguf, ct2, config, src, out, out_type, name)
    finally:
        ct2.close()
    return out


def _write(gguf, ct2: Ct2Model, config: dict, src: Path, out: Path, out_type: str, name: str | None) -> None:
    v = ct2
    embed = v["decoder/embeddings/weight"]
    n_vocab, d = embed.shape
    n_mels = v["encoder/conv1/weight"].shape[1]
    n_audio_ctx = v["encoder/position_encodings/encodings"].shape[0]
    n_text_ctx = v["decoder/position_encodings/encodings"].shape[0]
    enc_layers = sum(1 for k in v.variables if k.startswith("encoder/layer_") and k.endswith("/self_attention/linear_1/weight"))
    dec_layers = sum(1 for k in v.variables if k.startswith("decoder/layer_") and k.endswith("/self_attention/linear_1/weight"))
    n_ff = v["encoder/layer_0/ffn/linear_0/weight"].shape[0]
    enc_heads = int(ct2.scalar("encoder/num_heads", 0))
    dec_heads = int(ct2.scalar("decoder/num_heads", 0))
    if not enc_heads or not dec_heads or d % enc_heads or d % dec_heads:
        raise SourceModelError(f"{src}: head counts {enc_heads}/{dec_heads} do not divide the width {d}")
    for flag, want in (("decoder/pre_norm", 1), ("decoder/scale_embeddings", 0), ("decoder/alibi", 0)):
        got = ct2.scalar(flag, want)
        if int(got) != want:
            raise SourceModelError(f"{src}: {flag} = {got}; Whisper models have {want} (a variant this converter does not know)")
    tokens, types, merges, special = _tokens(src, n_vocab)

    def sid(text: str) -> int:
        if text not in special:
            raise SourceModelError(f"{src / 'tokenizer.json'}: no special token {text}")
        return special[text]

    w = gguf.GGUFWriter(None, ARCH)  # no path yet: written below through a temporary file
    model_name = name or src.name
    w.add_name(model_name)
    w.add_string("general.source.format", "ctranslate2")
    w.add_uint32(f"{ARCH}.converter_version", CONVERTER_VERSION)
    u32 = w.add_uint32
    u32(f"{ARCH}.n_mels", n_mels)
    u32(f"{ARCH}.sample_rate", SAMPLE_RATE)
    u32(f"{ARCH}.n_fft", N_FFT)
    u32(f"{ARCH}.hop_length", HOP)
    u32(f"{ARCH}.encoder.context_length", n_audio_ctx)
    u32(f"{ARCH}.encoder.block_count", enc_layers)
    u32(f"{ARCH}.encoder.attention.head_count", enc_heads)
    u32(f"{ARCH}.decoder.context_length", n_text_ctx)
    u32(f"{ARCH}.decoder.block_count", dec_layers)
    u32(f"{ARCH}.decoder.attention.head_count", dec_heads)
    u32(f"{ARCH}.embedding_length", d)
    u32(f"{ARCH}.feed_forward_length", n_ff)
    w.add_float32(f"{ARCH}.attention.layer_norm_epsilon", 1e-5)
    # Multilingual models have 51865 tokens or more (English-only ones one fewer): this is
    # how Whisper itself tells them apart.
    w.add_bool(f"{ARCH}.multilingual", n_vocab >= 51865)
    lang_ids = [int(i) for i in config.get("lang_ids", [])]
    w.add_array(f"{ARCH}.lang_ids", lang_ids)
    w.add_array(f"{ARCH}.languages", [tokens[i][2:-2] for i in lang_ids])
    w.add_array(f"{ARCH}.suppress_ids", [int(i) for i in config.get("suppress_ids", [])])
    w.add_array(f"{ARCH}.suppress_ids_begin", [int(i) for i in config.get("suppress_ids_begin", [])])
    heads = [int(x) for pair in config.get("alignment_heads", []) for x in pair]
    w.add_array(f"{ARCH}.alignment_heads", heads)
    for key, text in (
        ("eot", "<|endoftext|>"), ("sot", "<|startoftranscript|>"), ("sot_prev", "<|startofprev|>"),
        ("sot_lm", "<|startoflm|>"), ("no_timestamps", "<|notimestamps|>"), ("transcribe", "<|transcribe|>"),
        ("translate", "<|translate|>"),
    ):  # fmt: skip
        u32(f"{ARCH}.token.{key}", sid(text))
    no_speech = special.get("<|nospeech|>", special.get("<|nocaptions|>"))
    if no_speech is None:
        raise SourceModelError(f"{src / 'tokenizer.json'}: neither <|nospeech|> nor <|nocaptions|>")
    u32(f"{ARCH}.token.no_speech", no_speech)
    u32(f"{ARCH}.token.timestamp_begin", sid("<|notimestamps|>") + 1)

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(sid("<|startoftranscript|>"))
    w.add_eos_token_id(sid("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)

    def f32(a):
        return np.ascontiguousarray(a, np.float32)

    def matrix(tname: str, a: np.ndarray) -> None:
        """A 2-D weight in the chosen type."""
        if out_type == "f32":
            w.add_tensor(tname, f32(a))
        elif out_type == "f16":
            w.add_tensor(tname, np.ascontiguousarray(a, np.float16))
        else:
            if a.shape[-1] % 32:
                w.add_tensor(tname, np.ascontiguousarray(a, np.float16))
                return
            data, qt = _quantize(a, out_type)
            w.add_tensor(tname, data, raw_shape=data.shape, raw_dtype=qt)

    def floats(tname: str, a: np.ndarray) -> None:
        """Small tensors and tables: float32 (norms, biases, position tables)."""
        w.add_tensor(tname, f32(a))

    def conv(tname: str, a: np.ndarray) -> None:
        w.add_tensor(tname, f32(a) if out_type == "f32" else np.ascontiguousarray(a, np.float16))

    def norm(prefix: str, ct: str) -> None:
        floats(f"{prefix}.weight", v[f"{ct}/gamma"])
        floats(f"{prefix}.bias", v[f"{ct}/beta"])

    def linear(prefix: str, weight: np.ndarray, bias: np.ndarray | None) -> None:
        matrix(f"{prefix}.weight", weight)
        if bias is not None:
            floats(f"{prefix}.bias", bias)

    def key_bias_zero(bias: np.ndarray, where: str) -> None:
        if np.any(np.asarray(bias, np.float32) != 0):
            raise SourceModelError(f"{src}: {where} has a non-zero key bias; Whisper's keys have none")

    floats("mel_filters", mel_filterbank(n_mels))
    conv("enc.conv1.weight", v["encoder/conv1/weight"])
    floats("enc.conv1.bias", v["encoder/conv1/bias"])
    conv("enc.conv2.weight", v["encoder/conv2/weight"])
    floats("enc.conv2.bias", v["encoder/conv2/bias"])
    floats("enc.position_embd.weight", v["encoder/position_encodings/encodings"])
    for i in range(enc_layers):
        ct, p = f"encoder/layer_{i}", f"enc.blk.{i}"
        norm(f"{p}.attn_norm", f"{ct}/self_attention/layer_norm")
        qkv_w, qkv_b = v[f"{ct}/self_attention/linear_0/weight"], v[f"{ct}/self_attention/linear_0/bias"]
        key_bias_zero(qkv_b[d : 2 * d], f"{ct}/self_attention")
        linear(f"{p}.attn_q", qkv_w[:d], qkv_b[:d])
        linear(f"{p}.attn_k", qkv_w[d : 2 * d], None)
        linear(f"{p}.attn_v", qkv_w[2 * d :], qkv_b[2 * d :])
        linear(f"{p}.attn_out", v[f"{ct}/self_attention/linear_1/weight"], v[f"{ct}/self_attention/linear_1/bias"])
        norm(f"{p}.ffn_norm", f"{ct}/ffn/layer_norm")
        linear(f"{p}.ffn_up", v[f"{ct}/ffn/linear_0/weight"], v[f"{ct}/ffn/linear_0/bias"])
        linear(f"{p}.ffn_down", v[f"{ct}/ffn/linear_1/weight"], v[f"{ct}/ffn/linear_1/bias"])
    norm("enc.output_norm", "encoder/layer_norm")

    matrix("dec.token_embd.weight", embed)
    floats("dec.position_embd.weight", v["decoder/position_encodings/encodings"])
    for i in range(dec_layers):
        ct, p = f"decoder/layer_{i}", f"dec.blk.{i}"
        norm(f"{p}.attn_norm", f"{ct}/self_attention/layer_norm")
        qkv_w, qkv_b = v[f"{ct}/self_attention/linear_0/weight"], v[f"{ct}/self_attention/linear_0/bias"]
        key_bias_zero(qkv_b[d : 2 * d], f"{ct}/self_attention")
        linear(f"{p}.attn_q", qkv_w[:d], qkv_b[:d])
        linear(f"{p}.attn_k", qkv_w[d : 2 * d], None)
        linear(f"{p}.attn_v", qkv_w[2 * d :], qkv_b[2 * d :])
        linear(f"{p}.attn_out", v[f"{ct}/self_attention/linear_1/weight"], v[f"{ct}/self_attention/linear_1/bias"])
        norm(f"{p}.cross_attn_norm", f"{ct}/attention/layer_norm")
        linear(f"{p}.cross_attn_q", v[f"{ct}/attention/linear_0/weight"], v[f"{ct}/attention/linear_0/bias"])
        kv_w, kv_b = v[f"{ct}/attention/linear_1/weight"], v[f"{ct}/attention/linear_1/bias"]
        key_bias_zero(kv_b[:d], f"{ct}/attention")
        linear(f"{p}.cross_attn_k", kv_w[:d], None)
        linear(f"{p}.cross_attn_v", kv_w[d:], kv_b[d:])
        linear(f"{p}.cross_attn_out", v[f"{ct}/attention/linear_2/weight"], v[f"{ct}/attention/linear_2/bias"])
        norm(f"{p}.ffn_norm", f"{ct}/ffn/layer_norm")
        linear(f"{p}.ffn_up", v[f"{ct}/ffn/linear_0/weight"], v[f"{ct}/ffn/linear_0/bias"])
        linear(f"{p}.ffn_down", v[f"{ct}/ffn/linear_1/weight"], v[f"{ct}/ffn/linear_1/bias"])
    norm("dec.output_norm", "decoder/layer_norm")

    write_filled_writer(out, w)


def main(argv=None) -> None:
    import argparse

    p = argparse.ArgumentParser(description="Convert a CTranslate2 Whisper folder to GGUF.")
    p.add_argument("src")
    p.add_argument("out")
    p.add_argument("--type", default="f16", choices=OUT_TYPES)
    a = p.parse_args(argv)
    print(convert(a.src, a.out, a.type))
