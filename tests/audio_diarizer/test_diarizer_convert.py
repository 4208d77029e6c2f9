"""The converter of resemblyzer's checkpoint and the GGUF checks: real file in, clear errors
for everything else (nothing in a checkpoint is run)."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from cera.errors import CeraError, ModelConfigError
from cera_audio_diarizer.convert import ConversionError, convert, read_checkpoint
from cera_audio_diarizer.torch_legacy import MAGIC_NUMBER, PROTOCOL_VERSION, CheckpointError


@pytest.fixture(scope="module")
def pt_path():
    from cera.sources import bundles

    return bundles.fetch_file("resemblyzer-ge2e", quiet=True)


def test_checkpoint_tensors(pt_path):
    w = read_checkpoint(pt_path)
    assert w["lstm.weight_ih_l0"].shape == (1024, 40) and w["lstm.weight_hh_l2"].shape == (1024, 256)
    assert w["linear.weight"].shape == (256, 256) and len(w) == 14
    assert all(v.dtype == np.float32 and np.isfinite(v).all() for v in w.values())


def test_converted_file_reads_back(pt_path, tmp_path):
    from cera.formats.gguf import GGUFFile

    out = convert(pt_path, tmp_path / "ge2e.gguf")
    with GGUFFile(out) as g:
        assert g.architecture == "ge2e" and g.get("ge2e.lstm.layer_count") == 3
        assert set(g.tensors) == set(read_checkpoint(pt_path)) | {"mel_filters"}
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def _legacy(tmp_path, obj) -> str:
    p = tmp_path / "x.pt"
    with open(p, "wb") as f:
        pickle.dump(MAGIC_NUMBER, f, protocol=2)
        pickle.dump(PROTOCOL_VERSION, f, protocol=2)
        pickle.dump({"little_endian": True}, f, protocol=2)
        f.write(obj)
        pickle.dump([], f, protocol=2)
    return str(p)


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo owned",))


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path):
    p = _legacy(tmp_path, pickle.dumps(_Evil(), protocol=2))
    with pytest.raises(CheckpointError, match=r"refers to (posix|os)\.system.*refused"):
        read_checkpoint(p)


def test_not_a_checkpoint(tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x00" * 64)
    with pytest.raises(CheckpointError, match="junk.pt: not a"):
        read_checkpoint(junk)
    zipped = tmp_path / "new.pt"
    zipped.write_bytes(b"PK\x03\x04" + b"\x00" * 60)
    with pytest.raises(CheckpointError, match="zip checkpoint"):
        read_checkpoint(zipped)
    with pytest.raises(CheckpointError, match="no such file"):
        read_checkpoint(tmp_path / "absent.pt")


def test_a_checkpoint_without_the_encoder(tmp_path):
    p = _legacy(tmp_path, pickle.dumps({"step": 3}, protocol=2))
    with pytest.raises(ConversionError, match="no 'model_state'"):
        read_checkpoint(p)


def test_another_architecture_is_refused_by_the_encoder(tmp_path):
    import gguf

    from cera_audio_diarizer.encoder import SpeakerEncoder

    p = tmp_path / "other.gguf"
    w = gguf.GGUFWriter(str(p), "llama")
    w.add_tensor("t", np.zeros(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelConfigError, match="architecture 'llama' is not 'ge2e'"):
        SpeakerEncoder(p)
    assert issubclass(ConversionError, CeraError)
