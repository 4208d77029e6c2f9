"""Convert NVIDIA's Streaming Sortformer (a NeMo ``.nemo`` checkpoint) to GGUF.

A ``.nemo`` file is a tar archive holding ``model_config.yaml`` (the model's Hydra
configuration) and ``model_weights.ckpt`` (its state dict, a PyTorch zip checkpoint, read
without torch by `cera_audio_diarizer.torch_zip`; nothing in it runs). The converter reads
the ``SortformerEncLabelModel`` configuration this package runs and refuses any other:

- front end: NeMo's log-mel filterbank (``AudioToMelSpectrogramPreprocessor``, Hann window,
  pre-emphasis, power spectrum, Slaney mel filters, ``log(x + 2^-24)``, no normalization);
- pre-encode: ``dw_striding`` subsampling (a 3x3 convolution of stride 2, then depthwise 3x3
  stride-2 and pointwise convolutions, ReLU after each stage, a linear map of the flattened
  channels and frequencies to d_model);
- a FastConformer of ``rel_pos`` self-attention (untied biases), batch-norm convolution
  modules and half-step feed-forwards, input scaled by sqrt(d_model);
- the projection to the Transformer's size, a post-LN Transformer encoder with ReLU
  feed-forwards, and the two-layer sigmoid speaker head.

Tensors are written in F32 under cera's names (the architecture's graph is in
`cera_audio_diarizer.sortformer_graph`), rearranged so that the graph needs only cera's
ops: 2-D convolution kernels as per-tap weights, the subsampling's output map with its
inputs in (frequency, channel) order, each convolution module's batch norm folded into its
depthwise convolution, and each attention head's slice of ``linear_pos`` transposed with its
sine columns before its cosine columns (see the graph's docstring for why). The streaming
settings (speaker cache, FIFO, chunk and context lengths, the cache-update constants) and
the front end's settings are metadata under ``sortformer.*``.

Command line: ``cera diarize-convert --nemo model.nemo OUTPUT``.
"""

from __future__ import annotations

import math
import os
import tarfile
from pathlib import Path

import numpy as np

import cera
from cera.errors import CeraError
from cera.sources.bundles import sha256_file

from .convert import mel_filters
from .torch_zip import read_zip_checkpoint

ARCHITECTURE = "sortformer"
# Bumped whenever the files this module writes change, so cached conversions are redone.
CONVERTER_VERSION = 1
# Members of a .nemo larger than this are not a Sortformer's weights or configuration.
MAX_MEMBER_BYTES = 2 << 30
LN_EPS = 1e-5
BN_EPS = 1e-5

# The streaming settings read from ``sortformer_modules`` (NeMo's defaults where absent).
STREAMING_KEYS = {
    "spkcache_len": (188, int), "fifo_len": (0, int), "chunk_len": (188, int), "spkcache_update_period": (188, int),
    "chunk_left_context": (1, int), "chunk_right_context": (1, int), "spkcache_sil_frames_per_spk": (3, int),
    "pred_score_threshold": (0.25, float), "scores_boost_latest": (0.05, float), "sil_threshold": (0.2, float),
    "strong_boost_rate": (0.75, float), "weak_boost_rate": (1.5, float), "min_pos_scores_rate": (0.5, float),
}  # fmt: skip


class NemoError(CeraError):
    """The input is not a Streaming Sortformer ``.nemo`` checkpoint this converter understands."""


def read_nemo(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    """The configuration and the tensors (by NeMo's names, float32) of a ``.nemo`` file."""
    import yaml

    path = Path(path)
    where = str(path)
    if not path.is_file():
        raise NemoError(f"{where}: no such file")
    try:
        tar = tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError) as e:
        raise NemoError(f"{where}: not a .nemo archive (a tar file): {e}") from None
    with tar:
        found = {}
        for m in tar.getmembers():
            base = m.name.rsplit("/", 1)[-1]
            if base in ("model_config.yaml", "model_weights.ckpt") and m.isfile():
                if m.size > MAX_MEMBER_BYTES:
                    raise NemoError(f"{where}: {base} of {m.size} bytes is too large for a Sortformer")
                found[base] = m
        for base in ("model_config.yaml", "model_weights.ckpt"):
            if base not in found:
                raise NemoError(f"{where}: no {base} in the archive; is this a NeMo model file?")
        cfg_text = tar.extractfile(found["model_config.yaml"]).read()
        raw = tar.extractfile(found["model_weights.ckpt"]).read()
    try:
        cfg = yaml.safe_load(cfg_text)
    except yaml.YAMLError as e:
        raise NemoError(f"{where}: model_config.yaml is not valid YAML ({e})") from None
    if not isinstance(cfg, dict):
        raise NemoError(f"{where}: model_config.yaml is not a mapping")
    return cfg, read_zip_checkpoint(raw, f"{where}:model_weights.ckpt")


def _target(section: dict) -> str:
    return str(section.get("_target_", "")).rsplit(".", 1)[-1]


def _need(ok: bool, where: str, what: str) -> None:
    if not ok:
        raise NemoError(f"{where}: {what}; cera runs NeMo's Streaming Sortformer (SortformerEncLabelModel) only")


def check_config(cfg: dict, where: str) -> dict:
    """The settings cera needs from a Sortformer configuration, checked (a clear error names
    anything this converter does not run)."""
    for key in ("preprocessor", "encoder", "transformer_encoder", "sortformer_modules"):
        _need(isinstance(cfg.get(key), dict), where, f"the configuration has no {key!r} section")
    pre, enc, tf, sm = cfg["preprocessor"], cfg["encoder"], cfg["transformer_encoder"], cfg["sortformer_modules"]
    _need(_target(pre) == "AudioToMelSpectrogramPreprocessor", where, f"front end {pre.get('_target_')!r}")
    _need(_target(enc) == "ConformerEncoder", where, f"encoder {enc.get('_target_')!r}")
    _need(_target(tf) == "TransformerEncoder", where, f"transformer {tf.get('_target_')!r}")
    sr = int(pre.get("sample_rate", cfg.get("sample_rate", 16000)))
    s = {
        "sample_rate": sr,
        "n_fft": int(pre.get("n_fft", 512)),
        "win_length": int(round(float(pre.get("window_size", 0.02)) * sr)),
        "hop_length": int(round(float(pre.get("window_stride", 0.01)) * sr)),
        "n_mels": int(pre.get("features", 64)),
        "preemph": float(pre.get("preemph", 0.97)),
    }
    checks = [
        (str(pre.get("normalize", "per_feature")) in ("NA", "None", "none"), f"feature normalization {pre.get('normalize')!r}"),
        (pre.get("window", "hann") == "hann", f"window {pre.get('window')!r}"),
        (int(pre.get("frame_splicing", 1)) == 1, "frame splicing"),
        (float(pre.get("mag_power", 2.0)) == 2.0 and pre.get("log", True) in (True, None), "a spectrum other than log power"),
        (pre.get("log_zero_guard_type", "add") == "add" and float(pre.get("log_zero_guard_value", 2**-24)) == 2**-24,
         "a log guard other than adding 2^-24"),
        (not pre.get("exact_pad", False) and pre.get("mel_norm", "slaney") == "slaney", "exact_pad or a mel norm other than slaney"),
        (float(pre.get("lowfreq", 0) or 0) == 0 and pre.get("highfreq") in (None, sr / 2), "a band other than 0 Hz to Nyquist"),
        (enc.get("subsampling") == "dw_striding" and not enc.get("causal_downsampling", False),
         f"subsampling {enc.get('subsampling')!r} (causal: {enc.get('causal_downsampling')})"),
        (enc.get("self_attention_model") == "rel_pos" and enc.get("untie_biases", True), "attention other than rel_pos with untied biases"),
        (list(enc.get("att_context_size", [-1, -1])) == [-1, -1], f"limited attention context {enc.get('att_context_size')}"),
        (enc.get("conv_norm_type", "batch_norm") == "batch_norm", f"convolution norm {enc.get('conv_norm_type')!r}"),
        (enc.get("feat_out", -1) in (-1, None), "an encoder output projection (feat_out)"),
        (not enc.get("reduction"), "time reduction"),
        (not tf.get("pre_ln", False) and tf.get("hidden_act", "relu") == "relu", "a pre-LN Transformer or an activation other than ReLU"),
        (int(enc.get("feat_in", s["n_mels"])) == s["n_mels"], "encoder features that differ from the front end's"),
    ]  # fmt: skip
    for ok, what in checks:
        _need(ok, where, what)
    factor = int(enc.get("subsampling_factor", 8))
    _need(factor >= 2 and factor & (factor - 1) == 0, where, f"subsampling factor {factor}")
    s.update(
        subsampling_factor=factor, xscaling=bool(enc.get("xscaling", True)),
        n_speakers=int(sm.get("num_spks", cfg.get("max_num_of_spks", 4))),
    )  # fmt: skip
    for key, (default, kind) in STREAMING_KEYS.items():
        s[key] = kind(sm.get(key, default))
    return s


def _w(t: dict, name: str, shape: tuple | None = None) -> np.ndarray:
    if name not in t:
        raise NemoError(f"tensor {name!r} is missing from the checkpoint")
    a = np.asarray(t[name], np.float32)
    if shape is not None and a.shape != tuple(shape):
        raise NemoError(f"tensor {name!r} has shape {a.shape}, expected {tuple(shape)}")
    return a


def _linear(t, src, dst, out: dict, shape=None, bias=True):
    w = _w(t, f"{src}.weight")
    if w.ndim in (3, 4) and all(n == 1 for n in w.shape[2:]):  # a 1x1 Conv1d or Conv2d
        w = w.reshape(w.shape[:2])
    if shape is not None and w.shape != tuple(shape):
        raise NemoError(f"tensor {src}.weight has shape {w.shape}, expected {tuple(shape)}")
    out[f"{dst}.weight"] = w
    if f"{src}.bias" in t:
        out[f"{dst}.bias"] = _w(t, f"{src}.bias", (w.shape[0],))
    elif bias:
        raise NemoError(f"tensor {src}.bias is missing from the checkpoint")


def _norm(t, src, dst, out, d):
    out[f"{dst}.weight"] = _w(t, f"{src}.weight", (d,))
    out[f"{dst}.bias"] = _w(t, f"{src}.bias", (d,))


def rearrange(t: dict[str, np.ndarray], s: dict) -> tuple[dict[str, np.ndarray], dict]:
    """cera's tensors (see the module docstring) and the sizes read from their shapes."""
    out: dict[str, np.ndarray] = {}
    c0 = _w(t, "encoder.pre_encode.conv.0.weight")
    _need(c0.ndim == 4 and c0.shape[1:] == (1, 3, 3), "checkpoint", f"a first subsampling kernel of shape {c0.shape}")
    C = c0.shape[0]
    out["pre.conv0.weight"] = c0.reshape(C, 9)
    out["pre.conv0.bias"] = _w(t, "encoder.pre_encode.conv.0.bias", (C,))
    stages = int(math.log2(s["subsampling_factor"]))
    for k in range(1, stages):
        dw, pw = 3 * k - 1, 3 * k  # nn.Sequential indices: conv, ReLU, (dw, pw, ReLU) ...
        w = _w(t, f"encoder.pre_encode.conv.{dw}.weight", (C, 1, 3, 3))
        for tap in range(9):
            out[f"pre.dw{k}.{tap}.weight"] = np.ascontiguousarray(w[:, 0].reshape(C, 9)[:, tap])
        out[f"pre.dw{k}.bias"] = _w(t, f"encoder.pre_encode.conv.{dw}.bias", (C,))
        _linear(t, f"encoder.pre_encode.conv.{pw}", f"pre.pw{k}", out, (C, C))
    F = s["n_mels"]
    for _ in range(stages):
        F = (F + 2 - 3) // 2 + 1
    w = _w(t, "encoder.pre_encode.out.weight")
    d = w.shape[0]
    _need(w.shape == (d, C * F), "checkpoint", f"a subsampling output map of shape {w.shape} (expected ({d}, {C * F}))")
    # NeMo flattens (channel, frequency); the graph's rows hold (frequency, channel)
    out["pre.out.weight"] = np.ascontiguousarray(w.reshape(d, C, F).transpose(0, 2, 1).reshape(d, F * C))
    out["pre.out.bias"] = _w(t, "encoder.pre_encode.out.bias", (d,))

    n_layers = 0
    while f"encoder.layers.{n_layers}.norm_out.weight" in t:
        n_layers += 1
    _need(n_layers > 0, "checkpoint", "no FastConformer layers")
    u = _w(t, "encoder.layers.0.self_attn.pos_bias_u")
    H, dk = u.shape
    _need(H * dk == d and d % 2 == 0, "checkpoint", f"attention of {H} heads of {dk} for d_model {d}")
    ff = _w(t, "encoder.layers.0.feed_forward1.linear1.weight").shape[0]
    K = _w(t, "encoder.layers.0.conv.depthwise_conv.weight").shape[2]
    _need(K % 2 == 1, "checkpoint", f"an even convolution kernel ({K})")
    for i in range(n_layers):
        p, q = f"encoder.layers.{i}", f"enc.blk.{i}"
        for src, dst in (("feed_forward1", "ff1"), ("feed_forward2", "ff2")):
            _norm(t, f"{p}.norm_{src}", f"{q}.{dst}_norm", out, d)
            _linear(t, f"{p}.{src}.linear1", f"{q}.{dst}_up", out, (ff, d))
            _linear(t, f"{p}.{src}.linear2", f"{q}.{dst}_down", out, (d, ff))
        _norm(t, f"{p}.norm_self_att", f"{q}.attn_norm", out, d)
        for src, dst in (("linear_q", "attn_q"), ("linear_k", "attn_k"), ("linear_v", "attn_v"), ("linear_out", "attn_out")):
            _linear(t, f"{p}.self_attn.{src}", f"{q}.{dst}", out, (d, d), bias=False)
        out[f"{q}.attn_pos_u"] = _w(t, f"{p}.self_attn.pos_bias_u", (H, dk)).reshape(d)
        out[f"{q}.attn_pos_v"] = _w(t, f"{p}.self_attn.pos_bias_v", (H, dk)).reshape(d)
        wp = _w(t, f"{p}.self_attn.linear_pos.weight", (d, d))
        for h in range(H):
            wh = wp[h * dk : (h + 1) * dk].T  # [d (position features), dk]
            out[f"{q}.attn_pos.{h}.weight"] = np.ascontiguousarray(np.concatenate([wh[0::2], wh[1::2]]))
        _norm(t, f"{p}.norm_conv", f"{q}.conv_norm", out, d)
        _linear(t, f"{p}.conv.pointwise_conv1", f"{q}.conv_pw1", out, (2 * d, d), bias=False)
        dw = _w(t, f"{p}.conv.depthwise_conv.weight", (d, 1, K))[:, 0]
        dwb = _w(t, f"{p}.conv.depthwise_conv.bias", (d,)) if f"{p}.conv.depthwise_conv.bias" in t else np.zeros(d, np.float32)
        scale = _w(t, f"{p}.conv.batch_norm.weight", (d,)) / np.sqrt(_w(t, f"{p}.conv.batch_norm.running_var", (d,)) + BN_EPS)
        shift = _w(t, f"{p}.conv.batch_norm.bias", (d,)) - _w(t, f"{p}.conv.batch_norm.running_mean", (d,)) * scale
        for tap in range(K):
            out[f"{q}.conv_dw.{tap}.weight"] = (dw[:, tap] * scale).astype(np.float32)
        out[f"{q}.conv_dw.bias"] = (dwb * scale + shift).astype(np.float32)
        _linear(t, f"{p}.conv.pointwise_conv2", f"{q}.conv_pw2", out, (d, d), bias=False)
        _norm(t, f"{p}.norm_out", f"{q}.out_norm", out, d)

    has_proj = "sortformer_modules.encoder_proj.weight" in t
    if has_proj:
        _linear(t, "sortformer_modules.encoder_proj", "proj", out)
    dt = out["proj.weight"].shape[0] if has_proj else d
    n_tf = 0
    while f"transformer_encoder.layers.{n_tf}.layer_norm_1.weight" in t:
        n_tf += 1
    dff = _w(t, "transformer_encoder.layers.0.second_sub_layer.dense_in.weight").shape[0] if n_tf else 0
    for i in range(n_tf):
        p, q = f"transformer_encoder.layers.{i}", f"tf.blk.{i}"
        for src, dst in (("query_net", "attn_q"), ("key_net", "attn_k"), ("value_net", "attn_v"), ("out_projection", "attn_out")):
            _linear(t, f"{p}.first_sub_layer.{src}", f"{q}.{dst}", out, (dt, dt))
        _norm(t, f"{p}.layer_norm_1", f"{q}.attn_norm", out, dt)
        _linear(t, f"{p}.second_sub_layer.dense_in", f"{q}.ffn_up", out, (dff, dt))
        _linear(t, f"{p}.second_sub_layer.dense_out", f"{q}.ffn_down", out, (dt, dff))
        _norm(t, f"{p}.layer_norm_2", f"{q}.ffn_norm", out, dt)
    _linear(t, "sortformer_modules.first_hidden_to_hidden", "head.hidden", out, (dt, dt))
    n_spk = s["n_speakers"]
    _linear(t, "sortformer_modules.single_hidden_to_spks", "head.spk", out, (n_spk, dt))
    sizes = {"enc.layer_count": n_layers, "enc.d_model": d, "enc.head_count": H, "enc.ff_length": ff,
             "enc.conv_kernel": K, "subsampling_channels": C, "tf.layer_count": n_tf, "tf.d_model": dt,
             "tf.ff_length": dff}  # fmt: skip
    return out, sizes


def write_gguf(tensors: dict, s: dict, sizes: dict, tf_heads: int, out_path, description: str = "") -> Path:
    from cera.formats.gguf_write import write_gguf_file

    a = ARCHITECTURE

    def fill(writer) -> None:
        writer.add_name("Streaming Sortformer speaker diarizer")
        if description:
            writer.add_description(description)
        for key in ("sample_rate", "n_fft", "win_length", "hop_length", "n_mels", "subsampling_factor", "n_speakers"):
            writer.add_uint32(f"{a}.{key}", s[key])
        writer.add_float32(f"{a}.preemph", s["preemph"])
        writer.add_bool(f"{a}.enc.xscaling", s["xscaling"])
        for key, value in sizes.items():
            writer.add_uint32(f"{a}.{key}", value)
        writer.add_uint32(f"{a}.tf.head_count", tf_heads)
        for key, (_, kind) in STREAMING_KEYS.items():
            (writer.add_uint32 if kind is int else writer.add_float32)(f"{a}.streaming.{key}", s[key])
        for name, value in tensors.items():
            writer.add_tensor(name, np.ascontiguousarray(value, dtype=np.float32))
        writer.add_tensor("mel_filters", mel_filters(s["sample_rate"], s["n_fft"], s["n_mels"]))

    return write_gguf_file(out_path, a, fill)


def convert_nemo(nemo_path: str | os.PathLike, out_path: str | os.PathLike) -> Path:
    """Convert a Streaming Sortformer ``.nemo`` file to GGUF; returns the output path."""
    nemo_path = Path(nemo_path)
    where = str(nemo_path)
    cfg, tensors = read_nemo(nemo_path)
    s = check_config(cfg, where)
    try:
        out, sizes = rearrange(tensors, s)
    except NemoError as e:
        raise NemoError(f"{where}: {e}") from None
    tf_heads = int(cfg["transformer_encoder"].get("num_attention_heads", 8))
    if sizes["tf.d_model"] % tf_heads or sizes["enc.d_model"] != int(cfg["encoder"].get("d_model", sizes["enc.d_model"])):
        raise NemoError(f"{where}: the configuration's sizes do not match the checkpoint's tensors")
    description = (
        f"Streaming Sortformer converted by cera-audio-diarizer {cera.__version__} (converter v{CONVERTER_VERSION}) "
        f"from {nemo_path.name} (sha256 {sha256_file(nemo_path)})"
    )
    return write_gguf(out, s, sizes, tf_heads, out_path, description)
