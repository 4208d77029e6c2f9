"""The .tflite reader and the converter: the graph as TensorFlow Lite has it, every setting
under kws.*, unsupported layers refused by name, damaged files refused clearly."""

from __future__ import annotations

import json

import numpy as np
import pytest
from kws_cases import MODELS

from cera.errors import CeraError
from cera.formats.gguf import GGUFFile
from cera_audio_kws.convert import ConversionError, convert, graph_from_tflite
from cera_audio_kws.graph import UnsupportedLayer, check_graph
from cera_audio_kws.tflite import TFLiteError, parse_tflite, read_tflite

# The operators of each model's main subgraph, in order, as ai-edge-litert lists them
# (Interpreter._get_ops_details()); counts only, to keep the table short.
LITERT_OPS = {
    "okay_nabu": {"CALL_ONCE": 1, "VAR_HANDLE": 6, "READ_VARIABLE": 6, "ASSIGN_VARIABLE": 6, "CONCATENATION": 9,
                  "STRIDED_SLICE": 12, "CONV_2D": 6, "DEPTHWISE_CONV_2D": 8, "SPLIT_V": 3, "RESHAPE": 1,
                  "FULLY_CONNECTED": 1, "LOGISTIC": 1, "QUANTIZE": 1},
}


def test_reader_sees_what_litert_sees(model_files):
    litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is not installed")
    for stem in MODELS:
        path = model_files[stem][0]
        it = litert.Interpreter(str(path), experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
        it.allocate_tensors()  # the reference resolver: no delegate rewrites the operator list
        ops = [(o["op_name"], tuple(int(i) for i in o["inputs"]), tuple(int(i) for i in o["outputs"]))
               for o in it._get_ops_details()]
        main = read_tflite(path).subgraphs[0]
        mine = [(o.name, o.inputs, o.outputs) for o in main.operators]
        assert mine == ops, stem
        for d in it.get_tensor_details():
            t = main.tensors[d["index"]]
            assert t.name == d["name"] and t.shape == tuple(d["shape"])
            if t.scales:
                np.testing.assert_array_equal(np.float32(t.scales), d["quantization_parameters"]["scales"])


def test_op_counts(model_files):
    main = read_tflite(model_files["okay_nabu"][0]).subgraphs[0]
    counts = {}
    for o in main.operators:
        counts[o.name] = counts.get(o.name, 0) + 1
    assert counts == LITERT_OPS["okay_nabu"]


def test_gguf_holds_the_settings_and_the_weights(model_files, model_gguf):
    tfl, js = model_files["hey_jarvis"]
    settings = json.loads(js.read_text())
    with GGUFFile(model_gguf["hey_jarvis"]) as g:
        md = g.metadata
        assert g.architecture == "microwakeword"
        assert list(md["kws.wake_words"]) == ["Hey Jarvis"]
        assert md["kws.threshold"] == pytest.approx(settings["micro"]["probability_cutoff"])
        assert md["kws.sliding_window_size"] == settings["micro"]["sliding_window_size"] == 5
        assert md["kws.sample_rate"] == 16000 and md["kws.step_frames"] == 3
        assert md["kws.model_version"] == settings["version"]
        assert md["kws.micro.tensor_arena_size"] == settings["micro"]["tensor_arena_size"]
        assert md["kws.frontend.window_ms"] == 30 and md["kws.frontend.step_ms"] == 10
        assert md["kws.frontend.channels"] == 40 and md["kws.frontend.pcan"] is True
        graph = json.loads(md["kws.graph"])
        main = read_tflite(tfl).subgraphs[0]
        for i in graph["constants"]:  # weights as they are: int8 / int32 with their scales
            t = main.tensors[i]
            stored = np.asarray(g.tensor_data(f"net.{i}")).reshape(t.shape)
            np.testing.assert_array_equal(stored, t.data)
            assert graph["tensors"][i].get("scales", []) == list(t.scales)
            assert graph["tensors"][i].get("zero_points", []) == list(t.zero_points)


def _renamed_op(graph, k, name):
    import attrs

    ops = list(graph.operators)
    ops[k] = attrs.evolve(ops[k], op=name)
    return attrs.evolve(graph, operators=tuple(ops))


def test_unsupported_layer_is_refused_by_name(model_files):
    graph = graph_from_tflite(model_files["alexa"][0])
    k = next(i for i, o in enumerate(graph.operators) if o.op == "CONV_2D")
    with pytest.raises(UnsupportedLayer, match=rf"operator {k} is AVERAGE_POOL_2D"):
        check_graph(_renamed_op(graph, k, "AVERAGE_POOL_2D"), "x.tflite")


def test_unsupported_layer_in_a_tflite_file(model_files, tmp_path):
    """Rewrite one operator code in the file (CONV_2D -> MAX_POOL_2D, same byte width)."""
    tfl, js = model_files["alexa"]
    data = bytearray(tfl.read_bytes())
    model = read_tflite(tfl)
    # find the OperatorCode whose builtin code is CONV_2D (3) by trying each int32 field of value 3
    hits = []
    for pos in range(0, len(data) - 4, 4):
        if data[pos : pos + 4] == (3).to_bytes(4, "little"):
            trial = bytearray(data)
            trial[pos : pos + 4] = (17).to_bytes(4, "little")
            try:
                names = {o.name for o in parse_tflite(bytes(trial)).subgraphs[0].operators}
            except CeraError:
                continue
            if "MAX_POOL_2D" in names and "CONV_2D" not in names:
                hits.append(trial)
    assert hits and model.subgraphs
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(bytes(hits[0]))
    with pytest.raises(CeraError, match=r"MAX_POOL_2D"):
        convert(bad, tmp_path / "bad.gguf", js)
    assert not (tmp_path / "bad.gguf").exists()


@pytest.mark.parametrize("cut", [0, 7, 100, 4000])
def test_damaged_files_give_clear_errors(model_files, cut):
    data = model_files["okay_nabu"][0].read_bytes()
    with pytest.raises(TFLiteError, match="byte|not a TensorFlow Lite"):
        parse_tflite(data[:cut] if cut < 100 else data[:cut] + bytes(8), "cut.tflite")


def test_garbage_never_crashes():
    rs = np.random.RandomState(5)
    for _ in range(200):
        blob = bytearray(rs.randint(0, 256, rs.randint(8, 400)).astype(np.uint8).tobytes())
        blob[4:8] = b"TFL3"
        try:
            parse_tflite(bytes(blob))
        except CeraError:
            pass


def test_settings_are_required_and_checked(model_files, tmp_path):
    tfl, js = model_files["alexa"]
    lone = tmp_path / "alexa.tflite"
    lone.write_bytes(tfl.read_bytes())
    with pytest.raises(ConversionError, match="--json"):
        convert(lone, tmp_path / "a.gguf")
    bad = tmp_path / "bad.json"
    doc = json.loads(js.read_text())
    doc["micro"]["probability_cutoff"] = 3
    bad.write_text(json.dumps(doc))
    with pytest.raises(ConversionError, match="probability_cutoff 3"):
        convert(lone, tmp_path / "a.gguf", bad)


def test_unknown_metadata_is_refused(model_gguf, tmp_path):
    import gguf

    from cera_audio_kws.detector import HotwordDetector

    src = model_gguf["alexa"]
    out = tmp_path / "extra.gguf"
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(out, "microwakeword")
    with GGUFFile(src) as g:
        for key, value in g.metadata.items():
            if key.startswith("kws."):
                if isinstance(value, str):
                    w.add_string(key, value)
                elif isinstance(value, bool):
                    w.add_bool(key, value)
                elif isinstance(value, (list, np.ndarray)):
                    w.add_array(key, list(value))
                elif isinstance(value, float):
                    w.add_float32(key, value)
                else:
                    w.add_uint32(key, int(value))
    w.add_float32("kws.new_setting", 1.0)
    for t in r.tensors:
        w.add_tensor(t.name, np.array(t.data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(CeraError, match="kws.new_setting"):
        HotwordDetector.open(out)
