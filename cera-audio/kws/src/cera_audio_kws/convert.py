"""Convert a microWakeWord model (.tflite and its .json settings) to GGUF.

The network goes over as it is: every tensor with its type, shape, scales and zero points,
constant data unchanged (int8 weights, int32 biases), every operator in order with its
options (see `cera_audio_kws.graph` for the one-to-one mapping). The settings go under
``kws.*``:

| key | value |
|---|---|
| `kws.wake_words` | the label(s), e.g. `["Okay Nabu"]` |
| `kws.sample_rate` | 16000 |
| `kws.threshold`, `kws.sliding_window_size` | the detector: the mean of the last N probabilities must exceed it |
| `kws.step_frames` | feature frames per network step (the input's second dimension) |
| `kws.frontend.*` | the micro front end: window and step (ms), channels, band limits, noise reduction, PCAN, log scale, output scale |
| `kws.model_version`, `kws.trained_languages`, `kws.micro.*` | the rest of the .json, as written there |
| `kws.graph` | the network's structure (JSON) |

An operator the runtime does not run is refused by name here, at conversion, and again
when a file is loaded.

Command line: ``cera kws-convert MODEL.tflite [--json MODEL.json] -o MODEL.gguf``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import cera
from cera.errors import CeraError
from cera.formats.gguf_write import write_gguf_file
from cera.sources.bundles import sha256_file

from .frontend import FrontendConfig
from .graph import Graph, OperatorSpec, TensorSpec, UnsupportedLayer, Variable, check_graph
from .tflite import TFLiteError, read_tflite

ARCHITECTURE = "microwakeword"
# Bumped whenever the files this module writes change, so cached conversions are redone.
CONVERTER_VERSION = 1
SAMPLE_RATE = 16000


class ConversionError(CeraError):
    """The input is not a microWakeWord model (or settings file) this converter understands."""


def _spec(t) -> TensorSpec:
    return TensorSpec(t.name, t.type, tuple(t.shape), tuple(t.scales), tuple(t.zero_points), t.quantized_dimension)


def graph_from_tflite(path) -> Graph:
    """The streaming network of a .tflite file, in cera's form (see `cera_audio_kws.graph`)."""
    model = read_tflite(path)
    main = model.subgraphs[0]
    where = str(path)
    if len(main.inputs) != 1 or len(main.outputs) != 1:
        raise ConversionError(f"{where}: the model has {len(main.inputs)} inputs and {len(main.outputs)} outputs; "
                              f"a wake-word network has one of each")
    # The state variables and their initial values: CALL_ONCE runs a subgraph that assigns
    # a constant to each variable handle.
    initial: dict[str, tuple] = {}
    for op in main.operators:
        if op.name != "CALL_ONCE":
            continue
        k = op.options.get("init_subgraph_index", 0)
        if not 0 < k < len(model.subgraphs):
            raise ConversionError(f"{where}: CALL_ONCE names subgraph {k} of {len(model.subgraphs)}")
        init = model.subgraphs[k]
        handles = {}
        for iop in init.operators:
            if iop.name == "VAR_HANDLE":
                handles[iop.outputs[0]] = iop.options.get("shared_name", "")
            elif iop.name == "ASSIGN_VARIABLE":
                value = init.tensors[iop.inputs[1]]
                if iop.inputs[0] not in handles or value.data is None:
                    raise UnsupportedLayer(f"{where}: the initialization subgraph assigns something other than a constant")
                initial[handles[iop.inputs[0]]] = (value, value.data)
            else:
                raise UnsupportedLayer(f"{where}: operator {iop.name} in the initialization subgraph is not run "
                                       f"(only VAR_HANDLE and ASSIGN_VARIABLE)")
    names: dict[int, str] = {}
    operators = []
    for op in main.operators:
        if op.name == "CALL_ONCE":
            continue
        if op.name == "VAR_HANDLE":
            names[op.outputs[0]] = op.options.get("shared_name", "")
            continue
        if -1 in op.inputs:
            raise UnsupportedLayer(f"{where}: operator {op.index} ({op.name}) leaves out an optional input")
        operators.append(OperatorSpec(op.name, op.inputs, op.outputs, dict(op.options)))
    var_names = sorted(set(names.values()))
    missing = [n for n in var_names if n not in initial]
    if missing:
        raise ConversionError(f"{where}: state variable(s) {', '.join(missing)} have no initial value")
    variables = tuple(Variable(n, _spec(initial[n][0]), np.ascontiguousarray(initial[n][1])) for n in var_names)
    tensors = []
    constants = {}
    for t in main.tensors:
        spec = _spec(t)
        if t.index in names:
            spec = TensorSpec(spec.name, "RESOURCE", (1,), variable=var_names.index(names[t.index]))
        elif t.type == "RESOURCE":
            spec = TensorSpec(spec.name, "RESOURCE", (1,))
        elif t.data is not None:
            constants[t.index] = np.ascontiguousarray(t.data)
        if spec.shape == ():
            spec = TensorSpec(spec.name, spec.type, (1,), spec.scales, spec.zero_points, spec.quantized_dimension)
            if t.index in constants:
                constants[t.index] = constants[t.index].reshape(1)
        tensors.append(spec)
    graph = Graph(tuple(tensors), tuple(operators), variables, constants, main.inputs[0], main.outputs[0])
    check_graph(graph, where)
    return graph


def read_settings(path) -> dict:
    """microWakeWord's .json settings, checked."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConversionError(f"{path}: cannot read the settings file ({e.strerror or e})") from None
    except ValueError as e:
        raise ConversionError(f"{path}: not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("type") != "micro" or not isinstance(doc.get("micro"), dict):
        raise ConversionError(f"{path}: not microWakeWord settings (expected \"type\": \"micro\" and a \"micro\" object)")
    micro = doc["micro"]
    try:
        wake = doc["wake_word"]
        threshold = float(micro["probability_cutoff"])
        window = int(micro["sliding_window_size"])
        step_ms = int(micro.get("feature_step_size", 10))
    except (KeyError, TypeError, ValueError) as e:
        raise ConversionError(f"{path}: missing or malformed setting ({type(e).__name__}: {e})") from None
    if not isinstance(wake, str) or not wake.strip():
        raise ConversionError(f"{path}: \"wake_word\" must be a non-empty string")
    if not 0.0 < threshold < 1.0 or window < 1 or step_ms != 10:
        raise ConversionError(
            f"{path}: probability_cutoff {threshold} (must be in 0..1), sliding_window_size {window} (>= 1), "
            f"feature_step_size {step_ms} (cera's front end steps 10 ms)"
        )
    return doc


def write_gguf(graph: Graph, settings: dict, out_path, description: str = "") -> Path:
    """Write the network and its settings to GGUF, atomically."""
    micro = settings["micro"]

    def fill(w) -> None:
        w.add_name(f"microWakeWord {settings['wake_word']}")
        if settings.get("author"):
            w.add_author(str(settings["author"]))
        if settings.get("website"):
            w.add_url(str(settings["website"]))
        if description:
            w.add_description(description)
        w.add_array("kws.wake_words", [settings["wake_word"]])
        w.add_uint32("kws.sample_rate", SAMPLE_RATE)
        w.add_float32("kws.threshold", float(micro["probability_cutoff"]))
        w.add_uint32("kws.sliding_window_size", int(micro["sliding_window_size"]))
        w.add_uint32("kws.step_frames", int(graph.tensors[graph.input].shape[1]))
        w.add_uint32("kws.model_version", int(settings.get("version", 0)))
        w.add_array("kws.trained_languages", [str(x) for x in settings.get("trained_languages", [])] or ["en"])
        for key, value in sorted(micro.items()):
            if key in ("probability_cutoff", "sliding_window_size"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise ConversionError(f"setting micro.{key} = {value!r} is not a number or string")
            if isinstance(value, str):
                w.add_string(f"kws.micro.{key}", value)
            elif isinstance(value, int):
                w.add_int32(f"kws.micro.{key}", value)
            else:
                w.add_float32(f"kws.micro.{key}", value)
        FrontendConfig().write(w, "kws.frontend")
        w.add_string("kws.graph", json.dumps(graph.to_json(), separators=(",", ":")))
        for i in sorted(graph.constants):
            w.add_tensor(f"net.{i}", graph.constants[i].reshape(-1))
        for k, v in enumerate(graph.variables):
            w.add_tensor(f"state.{k}", v.initial.reshape(-1))

    return write_gguf_file(out_path, ARCHITECTURE, fill)


def convert(tflite_path, out_path, settings_path=None) -> Path:
    """Convert ``MODEL.tflite`` (settings from ``settings_path``, default ``MODEL.json`` beside it)."""
    tflite_path = Path(tflite_path)
    if not tflite_path.is_file():
        raise ConversionError(f"{tflite_path}: no such file")
    if settings_path is None:
        settings_path = tflite_path.with_suffix(".json")
        if not settings_path.is_file():
            raise ConversionError(
                f"{tflite_path}: its settings (wake word, threshold, window) are in microWakeWord's .json file, "
                f"and {settings_path.name} is not beside it; pass it with --json"
            )
    settings = read_settings(settings_path)
    try:
        graph = graph_from_tflite(tflite_path)
    except TFLiteError as e:
        raise ConversionError(str(e)) from None
    from .network import StreamingNetwork

    StreamingNetwork(graph, str(tflite_path))  # every operator planned: refused here, not at first use
    description = (
        f"microWakeWord '{settings['wake_word']}' converted by cera-audio-kws {cera.__version__} "
        f"(converter v{CONVERTER_VERSION}) from {tflite_path.name} (sha256 {sha256_file(tflite_path)})"
    )
    return write_gguf(graph, settings, out_path, description)


def main(argv=None) -> int:
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="Convert a microWakeWord model (.tflite + .json) to GGUF for cera.")
    parser.add_argument("tflite", help="the model's .tflite file")
    parser.add_argument("--json", dest="settings", default=None, help="its settings (default: the .json beside it)")
    parser.add_argument("-o", "--output", required=True, help="the GGUF file to write")
    args = parser.parse_args(argv)
    try:
        out = convert(args.tflite, args.output, args.settings)
    except CeraError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
