"""Fixtures of the hub tests: a local Hub server (cera.testing.hub_server) that
``HF_ENDPOINT`` points at, an empty Hugging Face cache per test, and no token."""

from __future__ import annotations

import pytest

from cera.testing.hub_server import HubServer


@pytest.fixture
def hub(tmp_path, monkeypatch):
    with HubServer() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        monkeypatch.setenv("CERA_CACHE_DIR", str(tmp_path / "cera-cache"))
        for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                    "HF_HUB_DISABLE_PROGRESS_BARS", "CERA_BUNDLES_REPO"):  # fmt: skip
            monkeypatch.delenv(var, raising=False)
        # a token file from a real `hf auth login` on this machine must not leak in
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        yield server


def write_split(src, out_prefix, max_tensors: int):
    """Split a GGUF file as llama.cpp's gguf-split does (gguf's writer with a tensor cap);
    returns the parts in order."""
    import gguf

    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    reader = gguf.GGUFReader(str(src))
    arch = reader.get_field("general.architecture").contents()
    writer = gguf.GGUFWriter(str(out_prefix) + ".gguf", arch, split_max_tensors=max_tensors)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in ("general.architecture", "general.alignment"):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return sorted(out_prefix.parent.glob(out_prefix.name + "-*-of-*.gguf"))
