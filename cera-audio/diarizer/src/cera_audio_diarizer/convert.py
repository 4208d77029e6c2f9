"""Convert Resemblyzer's GE2E speaker encoder (``pretrained.pt``) to GGUF.

The resemblyzer package (Apache-2.0) ships a speaker encoder trained with the generalized
end-to-end loss (GE2E): 40 mel channels of 25 ms windows every 10 ms, a 3-layer LSTM of
256 units, a linear projection to 256 values, ReLU and L2 normalization. Its
``pretrained.pt`` is a PyTorch checkpoint in the legacy format, read here without torch by
`cera_audio_diarizer.torch_legacy` (an allowlisted unpickler: nothing in the file runs).

The GGUF (architecture ``ge2e``) keeps PyTorch's names and values in F32: ``lstm.weight_ih_l{k}``,
``lstm.weight_hh_l{k}``, ``lstm.bias_ih_l{k}``, ``lstm.bias_hh_l{k}`` (gate rows i, f, g,
o), ``linear.weight``, ``linear.bias``; and ``mel_filters`` (40 x 201), the Slaney-scaled
mel filterbank librosa builds for resemblyzer's front end, so that the runtime needs no
librosa. The front end's settings are metadata under ``ge2e.*``. The checkpoint's training
leftovers (``similarity_weight``/``similarity_bias`` of the loss, the optimizer's moments)
are not part of the encoder and are left out.

Command line: ``cera diarize-convert [--pt pretrained.pt] OUTPUT``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

import cera
from cera.errors import CeraError
from cera.formats.gguf_write import write_gguf_file
from cera.sources.bundles import sha256_file

from .torch_legacy import read_legacy_checkpoint

ARCHITECTURE = "ge2e"
# Bumped whenever the files this module writes change, so cached conversions are redone.
CONVERTER_VERSION = 1

SAMPLE_RATE = 16000
N_FFT = 400  # 25 ms
HOP = 160  # 10 ms
N_MELS = 40
PARTIAL_FRAMES = 160  # 1.6 s: the windows the encoder was trained on
LSTM_GATE_ORDER = "ifgo"


class ConversionError(CeraError):
    """The input is not a GE2E speaker-encoder checkpoint this converter understands."""


def _hz_to_mel(f):
    """Slaney's mel scale (librosa's default, htk=False): linear below 1 kHz, log above."""
    f = np.asanyarray(f, dtype=np.float64)
    f_sp = 200.0 / 3
    mels = f / f_sp
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, np.log(6.4) / 27.0
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, mels)


def _mel_to_hz(m):
    m = np.asanyarray(m, dtype=np.float64)
    f_sp = 200.0 / 3
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, np.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


def mel_filters(sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS) -> np.ndarray:
    """(n_mels, 1 + n_fft // 2) triangular filters on Slaney's mel scale, area-normalized
    (``norm="slaney"``), from 0 Hz to the Nyquist frequency: librosa.filters.mel's defaults."""
    fft_freqs = np.linspace(0, sample_rate / 2, 1 + n_fft // 2)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(sample_rate / 2), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fft_freqs)
    weights = np.zeros((n_mels, len(fft_freqs)))
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights.astype(np.float32)


def read_checkpoint(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The encoder's tensors of a resemblyzer checkpoint, by PyTorch name, checked."""
    _, tensors = read_legacy_checkpoint(path)
    prefix = "model_state."
    state = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
    if not state:
        raise ConversionError(f"{path}: no 'model_state' in the checkpoint; is this resemblyzer's pretrained.pt?")
    if "lstm.weight_ih_l0" not in state:
        raise ConversionError(f"{path}: no tensor 'lstm.weight_ih_l0'; not a GE2E speaker encoder")
    layers = 0
    while f"lstm.weight_ih_l{layers}" in state:
        layers += 1
    hidden = state["lstm.weight_hh_l0"].shape[1]
    out = {}
    n_in = N_MELS
    for k in range(layers):
        want = {
            f"lstm.weight_ih_l{k}": (4 * hidden, n_in),
            f"lstm.weight_hh_l{k}": (4 * hidden, hidden),
            f"lstm.bias_ih_l{k}": (4 * hidden,),
            f"lstm.bias_hh_l{k}": (4 * hidden,),
        }
        for name, shape in want.items():
            if name not in state:
                raise ConversionError(f"{path}: tensor {name!r} is missing")
            if state[name].shape != shape:
                raise ConversionError(f"{path}: tensor {name!r} has shape {state[name].shape}, expected {shape}")
            out[name] = state[name]
        n_in = hidden
    for name in ("linear.weight", "linear.bias"):
        if name not in state:
            raise ConversionError(f"{path}: tensor {name!r} is missing")
        out[name] = state[name]
    if out["linear.weight"].shape[1] != hidden or out["linear.bias"].shape != (out["linear.weight"].shape[0],):
        raise ConversionError(f"{path}: the projection {out['linear.weight'].shape} does not follow an LSTM of {hidden}")
    known = set(out) | {"similarity_weight", "similarity_bias"}  # the GE2E loss's scale and offset
    extra = sorted(set(state) - known)
    if extra:
        raise ConversionError(f"{path}: tensors {extra[:3]} are not part of the GE2E encoder this converter knows")
    return out


def write_gguf(weights: dict[str, np.ndarray], out_path: str | os.PathLike, description: str = "") -> Path:
    """Write the encoder to a GGUF file, atomically (`write_gguf_file`)."""
    out_path = Path(out_path)
    layers = sum(1 for k in weights if k.startswith("lstm.weight_ih_l"))
    a = ARCHITECTURE

    def fill(writer) -> None:
        writer.add_name("Resemblyzer GE2E speaker encoder")
        writer.add_license("Apache-2.0")
        writer.add_author("Resemble AI (Corentin Jemine)")
        if description:
            writer.add_description(description)
        writer.add_uint32(f"{a}.sample_rate", SAMPLE_RATE)
        writer.add_uint32(f"{a}.n_fft", N_FFT)
        writer.add_uint32(f"{a}.hop_length", HOP)
        writer.add_uint32(f"{a}.n_mels", N_MELS)
        writer.add_uint32(f"{a}.partial_frames", PARTIAL_FRAMES)
        writer.add_uint32(f"{a}.lstm.layer_count", layers)
        writer.add_uint32(f"{a}.lstm.hidden_size", int(weights["lstm.weight_hh_l0"].shape[1]))
        writer.add_string(f"{a}.lstm.gate_order", LSTM_GATE_ORDER)
        writer.add_uint32(f"{a}.embedding_length", int(weights["linear.weight"].shape[0]))
        for name, value in weights.items():
            writer.add_tensor(name, np.ascontiguousarray(value, dtype=np.float32))
        writer.add_tensor("mel_filters", mel_filters())

    return write_gguf_file(out_path, a, fill)


def convert(pt_path: str | os.PathLike, out_path: str | os.PathLike) -> Path:
    """Convert resemblyzer's ``pretrained.pt`` to GGUF; returns the output path."""
    pt_path = Path(pt_path)
    weights = read_checkpoint(pt_path)
    description = (
        f"GE2E speaker encoder converted by cera-audio-diarizer {cera.__version__} (converter v{CONVERTER_VERSION}) "
        f"from {pt_path.name} (sha256 {sha256_file(pt_path)})"
    )
    return write_gguf(weights, out_path, description)
