"""The ONNX -> GGUF converter, loading VAD models, the plugin's registration, the default model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf_edit import DROP, GGMLQuantizationType, rewrite
from ort_peer import ort_probabilities

from cera.audio import load_vad
from cera_audio_io import read_audio
from cera.errors import AudioError, InvalidModelFile, ModelConfigError

DATA = Path(__file__).resolve().parent / "data"  # the folder tests/audio/conftest.py names too

onnx = pytest.importorskip("onnx", reason="onnx is not installed (a dependency of cera-audio-vad)")
gguf = pytest.importorskip("gguf")

MODULE_KEYS = [
    "stft.forward_basis_buffer",
    *(f"encoder.{i}.reparam_conv.{p}" for i in range(4) for p in ("weight", "bias")),
    "decoder.rnn.weight_ih",
    "decoder.rnn.weight_hh",
    "decoder.rnn.bias_ih",
    "decoder.rnn.bias_hh",
    "decoder.decoder.2.weight",
    "decoder.decoder.2.bias",
]


def _onnx_branch_weights(path):
    """The weights of each branch of the top-level `If sr == 16000`, read with onnx directly."""
    from onnx import numpy_helper

    model = onnx.load(str(path))
    (if_node,) = [n for n in model.graph.node if n.op_type == "If"]
    out = {}
    for attr in if_node.attribute:
        rate = 16000 if attr.name == "then_branch" else 8000
        weights = {}
        for node in attr.g.node:
            if node.op_type != "Constant":
                continue
            for key in MODULE_KEYS:
                if node.output[0].endswith("__" + key):
                    weights[key] = numpy_helper.to_array(node.attribute[0].t)
        out[rate] = weights
    return out


def test_converted_file_holds_both_networks(silero_gguf, silero_onnx_path):
    reader = gguf.GGUFReader(str(silero_gguf))  # the gguf package's reader, not cera's
    fields = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert fields["general.architecture"] == "silero-vad"
    assert fields["silero-vad.sample_rates"] == [16000, 8000]
    assert fields["silero-vad.frame_samples"] == [512, 256]
    assert fields["silero-vad.context_samples"] == [64, 32]
    assert fields["silero-vad.stft.filter_length"] == [256, 128]
    assert fields["silero-vad.stft.hop_length"] == [128, 64]
    assert fields["silero-vad.stft.pad_right"] == [64, 32]
    assert fields["silero-vad.encoder.strides"] == [1, 2, 2, 1]
    assert fields["silero-vad.lstm.hidden_size"] == 128
    assert fields["silero-vad.tensor_prefixes"] == ["_model", "_model_8k"]
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == 2 * len(MODULE_KEYS)
    expected = _onnx_branch_weights(silero_onnx_path)
    for rate, prefix in ((16000, "_model"), (8000, "_model_8k")):
        assert set(expected[rate]) == set(MODULE_KEYS)
        for key in MODULE_KEYS:
            t = tensors[f"{prefix}.{key}"]  # whisper.cpp's names for the 16 kHz network
            want = expected[rate][key]
            assert t.tensor_type == GGMLQuantizationType.F32
            assert [int(d) for d in t.shape] == list(reversed(want.shape))  # GGML order
            np.testing.assert_array_equal(np.asarray(t.data).reshape(want.shape), want)


def test_converter_rejects_what_it_cannot_read(tmp_path):
    from cera_audio_vad.convert import ConversionError, convert

    with pytest.raises(ConversionError, match="no such file"):
        convert(tmp_path / "missing.onnx", tmp_path / "o.gguf")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08\x07garbage" * 50)
    with pytest.raises(ConversionError, match="not an ONNX model"):
        convert(junk, tmp_path / "o.gguf")
    # a valid ONNX model that is not Silero VAD
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        "add",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1]) for n in ("a", "b")],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1])],
    )
    other = tmp_path / "add.onnx"
    onnx.save(helper.make_model(graph), str(other))
    with pytest.raises(ConversionError, match="no Silero VAD weights found"):
        convert(other, tmp_path / "o.gguf")
    assert not list(tmp_path.glob("o.gguf*"))  # nothing half-written left behind


def test_gguf_of_another_kind_is_not_a_vad(tmp_path, silero_gguf):
    writer = gguf.GGUFWriter(str(tmp_path / "llama.gguf"), "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(AudioError, match=r"llama\.gguf: GGUF architecture 'llama' is not a voice activity detection model; .*silero-vad"):
        load_vad(tmp_path / "llama.gguf")


def test_not_a_gguf_at_all():
    with pytest.raises(InvalidModelFile, match="speech_16k.flac"):
        load_vad(DATA / "speech_16k.flac")


@pytest.mark.parametrize(
    "change,error,match",
    [
        ({"tensors": {"_model.decoder.rnn.weight_hh": DROP}}, InvalidModelFile, r"tensor '_model\.decoder\.rnn\.weight_hh' is missing"),
        (
            {"tensors": {"_model.encoder.2.reparam_conv.bias": np.zeros(63, np.float32)}},
            InvalidModelFile,
            r"'_model\.encoder\.2\.reparam_conv\.bias' has shape \(63,\), expected \(64,\)",
        ),
        ({"kv": {"silero-vad.lstm.hidden_size": DROP}}, ModelConfigError, r"silero-vad\.lstm\.hidden_size"),
        ({"kv": {"silero-vad.window_shift": 3}}, ModelConfigError, r"does not understand metadata key 'silero-vad\.window_shift'"),
        ({"kv": {"silero-vad.lstm.gate_order": "iofc"}}, ModelConfigError, "gate order 'iofc'"),
        ({"kv": {"silero-vad.frame_samples": [512]}}, ModelConfigError, "has 1 entries, expected 2"),
        ({"kv": {"silero-vad.encoder.strides": [1, 2, 1, 1]}}, ModelConfigError, "leaves 2 time steps"),
    ],
)
def test_broken_silero_files(tmp_path, silero_gguf, change, error, match):
    bad = rewrite(silero_gguf, tmp_path / "bad.gguf", **change)
    with pytest.raises(error, match=match):
        load_vad(bad)


def test_quantized_weights_are_refused(tmp_path, silero_gguf):
    from gguf import quants

    w = np.ones((512, 128), np.float32)
    q = quants.quantize(w, GGMLQuantizationType.Q8_0)
    bad = rewrite(silero_gguf, tmp_path / "q8.gguf", raw={"_model.decoder.rnn.weight_ih": (q, GGMLQuantizationType.Q8_0)})
    with pytest.raises(InvalidModelFile, match=r"'_model\.decoder\.rnn\.weight_ih' is Q8_0; Silero VAD weights must be F32 or F16"):
        load_vad(bad)


def test_unserved_sample_rate(silero_gguf):
    with pytest.raises(AudioError, match="runs at 16000, 8000 Hz, not 22050 Hz"):
        load_vad(silero_gguf, sample_rate=22050)


def test_f16_weights_load(tmp_path, silero_gguf, ort_session):
    """Conv weights stored as F16 (as whisper.cpp stores them) load and stay close to the peer."""
    reader = gguf.GGUFReader(str(silero_gguf))
    halves = {
        t.name: np.asarray(t.data).reshape(tuple(reversed([int(d) for d in t.shape]))).astype(np.float16)
        for t in reader.tensors
        if "encoder" in t.name and t.name.endswith("weight")
    }
    f16 = rewrite(silero_gguf, tmp_path / "f16.gguf", tensors=halves)
    vad = load_vad(f16)
    x = read_audio(DATA / "speech_16k.flac", 16000).samples
    diff = np.abs(vad.probabilities(x) - ort_probabilities(ort_session, x, 16000))
    assert 1e-6 < diff.max() < 0.05  # rounded weights: close, but not the same model


def test_plugin_registers_component_and_commands():
    from cera.plugins.manager import PluginManager

    manager = PluginManager(allow={"vad"})
    manager.load_entry_points()
    (record,) = [r for r in manager.records if r.name == "vad"]
    assert record.status == "ok", record.error
    assert record.distribution == "cera-audio-vad"
    assert record.audio == ["silero-vad"]
    assert sorted(record.commands) == ["vad", "vad-convert"]
    comp = manager.audio["silero-vad"]
    assert (comp.kind, comp.architectures, comp.factory) == ("vad", ("silero-vad",), "cera_audio_vad.silero:SileroVad")


def test_plugin_module_is_cheap():
    code = (
        "import sys, cera_audio_vad.plugin as p\n"
        "from cera.plugins.manager import PluginManager\n"
        "m = PluginManager(allow=set()); m.register_plugin(p, 'vad')\n"
        "heavy = [x for x in ('numpy', 'onnx', 'soundfile', 'soxr', 'gguf', 'cera_audio_vad.silero') if x in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_default_model_is_converted_once_and_checked(tmp_path, monkeypatch, silero_onnx_path):
    from cera.sources import bundles
    from cera_audio_vad import convert as convert_module
    from cera_audio_vad import default

    monkeypatch.setenv("CERA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(bundles, "fetch_file", lambda name, quiet=False: silero_onnx_path)
    calls = []
    real_convert = convert_module.convert

    def counting_convert(src, dst):
        calls.append(dst)
        return real_convert(src, dst)

    monkeypatch.setattr(convert_module, "convert", counting_convert)
    path = default.default_model_path(quiet=True)
    assert path == tmp_path / "converted" / default.FILE_NAME
    assert load_vad(path).sample_rates == (16000, 8000)
    assert default.default_model_path(quiet=True) == path
    assert len(calls) == 1  # the second call used the cache
    with open(path, "r+b") as f:  # damage it: the record no longer matches, so it is redone
        f.seek(2000)
        f.write(b"\xff\xff\xff\xff")
    assert default.default_model_path(quiet=True) == path
    assert len(calls) == 2
    assert load_vad(path).sample_rate == 16000
