"""`cera convert whisper`: CTranslate2 folders to GGUF, deterministic, self-describing; bad
sources refused with a clear error."""

from __future__ import annotations

import hashlib
import json
import struct

import pytest
from cera_audio_whisper.convert import convert
from cera_audio_whisper.ct2 import SourceModelError

from cera.sources import bundles
from cera.formats.gguf import GGUFFile
from cera.text.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tiny_src():
    return bundles.fetch("faster-whisper-tiny.en", quiet=True)


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_same_source_same_bytes(tiny_src, tmp_path):
    a, b = convert(tiny_src, tmp_path / "a.gguf", "q8_0"), convert(tiny_src, tmp_path / "b.gguf", "q8_0")
    assert sha(a) == sha(b)
    c = convert(tiny_src, tmp_path / "c.gguf", "f16")
    assert sha(c) != sha(a) and sha(c) == sha(convert(tiny_src, tmp_path / "d.gguf", "f16"))


def test_gguf_describes_the_model(tiny_src, tmp_path):
    path = convert(tiny_src, tmp_path / "t.gguf", "q8_0")
    config = json.loads((tiny_src / "config.json").read_text())
    with GGUFFile(path) as g:
        md = g.metadata
        assert g.architecture == "whisper"
        assert md["whisper.n_mels"] == 80 and md["whisper.embedding_length"] == 384
        assert md["whisper.encoder.block_count"] == md["whisper.decoder.block_count"] == 4
        assert md["whisper.encoder.attention.head_count"] == 6
        assert md["whisper.encoder.context_length"] == 1500 and md["whisper.decoder.context_length"] == 448
        assert md["whisper.multilingual"] is False  # tiny.en: 51864 tokens
        assert len(md["tokenizer.ggml.tokens"]) == 51864
        assert md["whisper.token.eot"] == 50256 and md["whisper.token.sot"] == 50257
        assert md["whisper.token.no_timestamps"] == 50362 and md["whisper.token.timestamp_begin"] == 50363
        assert list(md["whisper.suppress_ids"]) == config["suppress_ids"]
        assert md["tokenizer.ggml.tokens"][50363] == "<|0.00|>" and md["tokenizer.ggml.tokens"][51863] == "<|30.00|>"
        types = {name: t.type_name for name, t in g.tensors.items()}
        assert types["dec.blk.0.attn_q.weight"] == "Q8_0" and types["dec.token_embd.weight"] == "Q8_0"
        assert types["enc.blk.0.attn_norm.weight"] == "F32" and types["enc.conv1.weight"] == "F16"
        assert g.tensors["mel_filters"].numpy_shape == (80, 201)
        assert "enc.blk.0.attn_k.bias" not in types  # Whisper's keys have no bias
        tok = Tokenizer.from_gguf(g)
        # ids of " The quick" as faster-whisper decoded them in the fox clip
        assert tok.encode(" The quick", add_special=False) == [383, 2068]
        assert tok.decode([383, 2068, 7586, 21831]) == " The quick brown fox"


def test_bad_sources_are_refused(tmp_path, tiny_src):
    with pytest.raises(SourceModelError, match="not a folder"):
        convert(tmp_path / "nothing", tmp_path / "o.gguf")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceModelError, match="no model.bin"):
        convert(tmp_path / "empty", tmp_path / "o.gguf")
    # a truncated model.bin names the offset
    trunc = tmp_path / "trunc"
    trunc.mkdir()
    (trunc / "model.bin").write_bytes((tiny_src / "model.bin").read_bytes()[:5000])
    with pytest.raises(SourceModelError, match="truncated"):
        convert(trunc, tmp_path / "o.gguf")

    def model_bin(version=6, spec="TransformerSpec"):
        name = spec.encode() + b"\0"
        return struct.pack("<I", version) + struct.pack("<H", len(name)) + name + struct.pack("<III", 1, 0, 0)

    other = tmp_path / "other"
    other.mkdir()
    (other / "model.bin").write_bytes(model_bin())
    with pytest.raises(SourceModelError, match="not a Whisper model"):
        convert(other, tmp_path / "o.gguf")
    (other / "model.bin").write_bytes(model_bin(version=5))
    with pytest.raises(SourceModelError, match="binary version 5"):
        convert(other, tmp_path / "o.gguf")
    with pytest.raises(SourceModelError, match="unknown weight type"):
        convert(tiny_src, tmp_path / "o.gguf", "q2_k")
    assert not (tmp_path / "o.gguf").exists()
