"""Convert Silero VAD (v5/v6) from its official ONNX file to GGUF.

The ONNX graph of Silero VAD holds one complete network per sample rate: the file
shipped by the silero-vad package branches on ``sr == 16000`` into two subgraphs whose
weights are ``Constant`` nodes; other exports keep them as initializers (``model.*``,
``model_8k.*``). The converter collects every float tensor of the graph and its
subgraphs, groups them by the name prefix in front of the PyTorch module path
(``stft.forward_basis_buffer``, ``encoder.N.reparam_conv.*``, ``decoder.rnn.*``,
``decoder.decoder.2.*``), and tells the rates apart by the STFT filter length: 256
samples is the 16 kHz network, 128 the 8 kHz one (a 16 ms window either way).

The GGUF keeps PyTorch's tensor shapes and values (F32, PyTorch LSTM gate order i, f, g,
o) under the names whisper.cpp uses for its Silero VAD file: ``_model.<module path>`` for
16 kHz, and ``_model_8k.<module path>`` (Silero's own module name) for 8 kHz. The
hyperparameters that the graph does not spell out as data (frame and context lengths are
the Python wrapper's; the reflect padding is the STFT module's) are written as metadata,
one array entry per sample rate, in the order of ``silero-vad.sample_rates``.

Command line: ``python -m cera_audio_vad.convert silero_vad.onnx silero-vad.gguf``
(or ``cera vad-convert``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

import cera
from cera.errors import CeraError
from cera.formats.gguf_write import write_gguf_file
from cera.sources.bundles import sha256_file

ARCHITECTURE = "silero-vad"
# Bumped whenever the files this module writes change, so cached conversions are redone.
CONVERTER_VERSION = 1

# STFT filter length (samples) -> sample rate: both networks look at 16 ms windows.
RATE_BY_FILTER_LENGTH = {256: 16000, 128: 8000}
# What the silero-vad wrapper feeds the network per call, by sample rate: the new frame,
# and the tail of the previous input prepended to it (v5 and later).
FRAME_SAMPLES = {16000: 512, 8000: 256}
CONTEXT_SAMPLES = {16000: 64, 8000: 32}
TENSOR_PREFIX = {16000: "_model", 8000: "_model_8k"}
ENCODER_STRIDES = (1, 2, 2, 1)
LSTM_GATE_ORDER = "ifgo"  # PyTorch's order of the four gates in weight_ih/weight_hh rows

_MODULE_KEYS = (
    "stft.forward_basis_buffer",
    *(f"encoder.{i}.reparam_conv.{p}" for i in range(len(ENCODER_STRIDES)) for p in ("weight", "bias")),
    "decoder.rnn.weight_ih",
    "decoder.rnn.weight_hh",
    "decoder.rnn.bias_ih",
    "decoder.rnn.bias_hh",
    "decoder.decoder.2.weight",
    "decoder.decoder.2.bias",
)
_KEY_RE = re.compile("^(?P<prefix>.*?)(?P<key>" + "|".join(re.escape(k) for k in _MODULE_KEYS) + ")$")


class ConversionError(CeraError):
    """The input is not a Silero VAD ONNX file this converter understands."""


def _require_onnx():
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError as e:  # a dependency of cera-audio-vad, but be clear if it is gone
        raise ConversionError(
            "converting Silero VAD from ONNX needs the `onnx` package, which is not installed: "
            "`pip install onnx` (it is a dependency of cera-audio-vad; reinstall that)"
        ) from e
    return onnx, numpy_helper


def _walk_graph(graph, tensors: dict, convs: dict, numpy_helper) -> None:
    """Collect float tensors (initializers and Constant nodes) and Conv attributes, recursively."""
    for init in graph.initializer:
        tensors[init.name] = numpy_helper.to_array(init)
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and attr.HasField("t"):
                    tensors[node.output[0]] = numpy_helper.to_array(attr.t)
        elif node.op_type == "Conv" and len(node.input) >= 2:
            attrs = {a.name: list(a.ints) for a in node.attribute if a.ints}
            convs[node.input[1]] = attrs
        for attr in node.attribute:
            if attr.HasField("g"):
                _walk_graph(attr.g, tensors, convs, numpy_helper)
            for sub in attr.graphs:
                _walk_graph(sub, tensors, convs, numpy_helper)


def read_onnx(path: str | os.PathLike) -> dict[int, dict[str, np.ndarray]]:
    """The weights of each sample rate's network in a Silero VAD ONNX file.

    Returns ``{sample_rate: {module key: float32 array}}`` with PyTorch's shapes.
    """
    onnx, numpy_helper = _require_onnx()
    path = Path(path)
    if not path.is_file():
        raise ConversionError(f"{path}: no such file")
    try:
        model = onnx.load(str(path))
    except Exception as e:  # protobuf's DecodeError, or onnx's own
        raise ConversionError(f"{path}: not an ONNX model ({type(e).__name__}: {e})") from None
    tensors: dict[str, np.ndarray] = {}
    convs: dict[str, dict] = {}
    _walk_graph(model.graph, tensors, convs, numpy_helper)

    groups: dict[str, dict[str, str]] = {}  # prefix -> key -> tensor name
    for name in tensors:
        m = _KEY_RE.match(name)
        if m:
            groups.setdefault(m["prefix"], {})[m["key"]] = name
    if not groups:
        raise ConversionError(
            f"{path}: no Silero VAD weights found (no tensor named like 'encoder.0.reparam_conv.weight'); "
            f"this converter reads the silero_vad.onnx of the silero-vad package (v5/v6)"
        )

    networks: dict[int, dict[str, np.ndarray]] = {}
    for prefix, names in sorted(groups.items()):
        missing = [k for k in _MODULE_KEYS if k not in names]
        if missing:
            raise ConversionError(f"{path}: the network under prefix {prefix!r} lacks {', '.join(missing)}")
        weights = {k: np.ascontiguousarray(tensors[names[k]], dtype=np.float32) for k in _MODULE_KEYS}
        basis = weights["stft.forward_basis_buffer"]
        if basis.ndim != 3 or basis.shape[1] != 1:
            raise ConversionError(f"{path}: {names['stft.forward_basis_buffer']} has shape {basis.shape}, expected (2F, 1, N)")
        filter_length = basis.shape[2]
        rate = RATE_BY_FILTER_LENGTH.get(filter_length)
        if rate is None:
            raise ConversionError(
                f"{path}: STFT filter length {filter_length} under prefix {prefix!r} matches no known Silero VAD "
                f"sample rate (256 -> 16000 Hz, 128 -> 8000 Hz)"
            )
        if rate in networks:
            raise ConversionError(f"{path}: two networks for {rate} Hz (one under prefix {prefix!r})")
        _check_conv_attrs(path, names, convs, filter_length)
        networks[rate] = weights
    return networks


def _check_conv_attrs(path, names: dict[str, str], convs: dict[str, dict], filter_length: int) -> None:
    """Where the graph states conv strides and paddings, they must be the ones we compute with."""
    expected = {"stft.forward_basis_buffer": {"strides": [filter_length // 2], "pads": [0, 0]}}
    for i, stride in enumerate(ENCODER_STRIDES):
        expected[f"encoder.{i}.reparam_conv.weight"] = {"strides": [stride], "pads": [1, 1], "kernel_shape": [3]}
    for key, want in expected.items():
        attrs = convs.get(names[key])
        if attrs is None:
            continue  # an export that applies the weight through another op: shapes are checked on load
        for attr, value in want.items():
            got = attrs.get(attr)
            if got is not None and list(got) != value:
                raise ConversionError(f"{path}: the Conv using {names[key]} has {attr}={got}, expected {value}")



def write_gguf(networks: dict[int, dict[str, np.ndarray]], out_path: str | os.PathLike, description: str = "") -> Path:
    """Write the networks to a GGUF file, atomically (a temporary name renamed when complete)."""

    rates = sorted(networks, reverse=True)  # 16000 first: the default rate

    def fill(writer) -> None:
        writer.add_name("Silero VAD")
        writer.add_license("MIT")
        writer.add_author("Silero Team")
        if description:
            writer.add_description(description)
        a = ARCHITECTURE
        filter_lengths = [networks[r]["stft.forward_basis_buffer"].shape[2] for r in rates]
        writer.add_array(f"{a}.sample_rates", rates)
        writer.add_array(f"{a}.frame_samples", [FRAME_SAMPLES[r] for r in rates])
        writer.add_array(f"{a}.context_samples", [CONTEXT_SAMPLES[r] for r in rates])
        writer.add_array(f"{a}.tensor_prefixes", [TENSOR_PREFIX[r] for r in rates])
        writer.add_array(f"{a}.stft.filter_length", filter_lengths)
        writer.add_array(f"{a}.stft.hop_length", [n // 2 for n in filter_lengths])
        # Reflect padding at the end of each input only (none at the start), as in the graph.
        writer.add_array(f"{a}.stft.pad_right", [n // 4 for n in filter_lengths])
        writer.add_array(f"{a}.encoder.strides", list(ENCODER_STRIDES))
        writer.add_uint32(f"{a}.lstm.hidden_size", int(networks[rates[0]]["decoder.rnn.weight_hh"].shape[1]))
        writer.add_string(f"{a}.lstm.gate_order", LSTM_GATE_ORDER)
        for rate in rates:
            for key in _MODULE_KEYS:
                writer.add_tensor(f"{TENSOR_PREFIX[rate]}.{key}", networks[rate][key])

    return write_gguf_file(out_path, ARCHITECTURE, fill)


def convert(onnx_path: str | os.PathLike, out_path: str | os.PathLike) -> Path:
    """Convert a Silero VAD ONNX file to GGUF; returns the output path."""
    onnx_path = Path(onnx_path)
    networks = read_onnx(onnx_path)
    rates = ", ".join(f"{r} Hz" for r in sorted(networks, reverse=True))
    description = (
        f"Silero VAD converted by cera-audio-vad {cera.__version__} (converter v{CONVERTER_VERSION}) "
        f"from {onnx_path.name} (sha256 {sha256_file(onnx_path)}); networks: {rates}"
    )
    return write_gguf(networks, out_path, description)


def main(argv=None) -> int:
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="Convert Silero VAD (v5/v6 ONNX) to GGUF for cera.")
    parser.add_argument("onnx", help="silero_vad.onnx (from the silero-vad package's silero_vad/data/)")
    parser.add_argument("output", help="the GGUF file to write")
    args = parser.parse_args(argv)
    try:
        out = convert(args.onnx, args.output)
    except CeraError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
