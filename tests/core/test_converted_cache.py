"""The converted-file cache: a file is reused only when its record matches it and the source."""

import json

import pytest

from cera.sources.converted import cached_conversion


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CERA_CACHE_DIR", str(tmp_path))
    return tmp_path / "converted"


def _maker(calls, payload=b"gguf"):
    def make(path):
        calls.append(path)
        path.write_bytes(payload)

    return make


def test_converts_once_then_reuses(cache, capsys):
    calls = []
    first = cached_conversion("m.gguf", {"v": 1}, _maker(calls), label="src")
    assert "cera: converting src to" in capsys.readouterr().err
    second = cached_conversion("m.gguf", {"v": 1}, _maker(calls), label="src")
    assert first == second == cache / "m.gguf" and len(calls) == 1
    assert capsys.readouterr().err == ""
    assert json.loads((cache / "m.gguf.json").read_text())["source"] == {"v": 1}


def test_another_source_or_a_damaged_file_converts_again(cache):
    calls = []
    cached_conversion("m.gguf", {"v": 1}, _maker(calls), label="src", quiet=True)
    cached_conversion("m.gguf", {"v": 2}, _maker(calls), label="src", quiet=True)
    assert len(calls) == 2
    (cache / "m.gguf").write_bytes(b"gguX")  # damaged after the record was written
    cached_conversion("m.gguf", {"v": 2}, _maker(calls), label="src", quiet=True)
    assert len(calls) == 3 and (cache / "m.gguf").read_bytes() == b"gguf"


def test_a_failed_conversion_writes_no_record(cache):
    def broken(path):
        raise RuntimeError("bad source")

    with pytest.raises(RuntimeError, match="bad source"):
        cached_conversion("m.gguf", {"v": 1}, broken, label="src", quiet=True)
    assert not (cache / "m.gguf.json").exists()
