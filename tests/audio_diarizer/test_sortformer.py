"""The Streaming Sortformer: the .nemo converter, the forward pass on cera's graphs and the
speaker-cache streaming, against NeMo's stored outputs of a random-weight model of the
released architecture (data/make_sortformer_reference.py, sizes shrunk as it says), and
`cera diarize -m <Hub repository>` through cera's Hub client against the local Hub server."""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from diar_cases import DATA

from cera.errors import CeraError

NEMO = DATA / "sortformer_tiny.nemo"
SECONDS = 8.0
# float32 graphs against NeMo's float32 torch: the largest differences measured on cera's CPU
# backend are given with each test; the bounds leave room for other summation orders
# (another backend, other thread counts).
PROB_ATOL = 1e-5


@pytest.fixture(scope="module")
def ref():
    with np.load(DATA / "sortformer_reference.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def audio():
    from cera_audio_io import read_audio

    return read_audio(DATA / "two_voices.flac", 16000).samples[: int(SECONDS * 16000)]


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory):
    from cera_audio_diarizer.sortformer_convert import convert_nemo

    return convert_nemo(NEMO, tmp_path_factory.mktemp("sortformer") / "tiny.gguf")


@pytest.fixture(scope="module")
def model(gguf_path):
    from cera_audio_diarizer.sortformer import SortformerModel

    m = SortformerModel(gguf_path, threads=2)
    yield m
    m.close()


def test_front_end_equals_nemo(model, audio, ref):
    from cera_audio_diarizer.sortformer_mel import MelStream

    want = ref["mel"]
    m = model.mel_stream()
    got = np.concatenate([m.push(audio), m.finish()])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-3, rtol=0)  # measured 1.3e-4 (a float64 STFT here)
    # pushed in pieces, the frames are the same
    s = MelStream(model.filters, 512, 400, 160)
    parts = [s.push(audio[a : a + 1234]) for a in range(0, len(audio), 1234)] + [s.finish()]
    np.testing.assert_allclose(np.concatenate(parts), got, atol=1e-5, rtol=0)  # FFTs in other batches


def test_pre_encode_equals_nemo(model, ref):
    got = model.pre_encode(ref["mel"])
    assert got.shape == ref["pre_encode"].shape
    np.testing.assert_allclose(got, ref["pre_encode"], atol=1e-5, rtol=0)  # measured 1.8e-7


def test_offline_forward_equals_nemo(model, ref):
    got = model.offline(ref["mel"])
    assert got.shape == ref["offline"].shape
    np.testing.assert_allclose(got, ref["offline"], atol=PROB_ATOL, rtol=0)  # measured 1.3e-6
    assert ref["offline"].min() < 0.01 and ref["offline"].max() > 0.9  # the reference is not degenerate


def test_streaming_equals_nemo(model, ref):
    got = model.streaming(ref["mel"])
    assert got.shape == ref["streaming"].shape
    np.testing.assert_allclose(got, ref["streaming"], atol=PROB_ATOL, rtol=0)  # measured 1.2e-6
    assert ((ref["streaming"] > 0.5).sum(axis=0) > 0).all()  # every slot is active somewhere
    # the speaker cache mattered: streaming is not the offline pass
    assert np.abs(ref["streaming"] - ref["offline"]).max() > 0.05


def test_streaming_from_audio_equals_nemo(model, audio, ref):
    m = model.mel_stream()
    got = model.streaming(np.concatenate([m.push(audio), m.finish()]))
    np.testing.assert_allclose(got, ref["streaming_audio"], atol=PROB_ATOL, rtol=0)  # measured 2.0e-6


def _turns_of(probs, threshold=0.5, frame=0.08, end=SECONDS):
    """Independent of the diarizer: runs of frames above the threshold per slot, labelled by
    order of first activity."""
    order = []
    for row in probs:
        for s in np.flatnonzero(row > threshold):
            if s not in order:
                order.append(int(s))
    out = []
    for s in order:
        active = np.concatenate([[False], probs[:, s] > threshold, [False]])
        edges = np.flatnonzero(active[1:] != active[:-1])
        for a, b in zip(edges[0::2], edges[1::2], strict=True):
            out.append((round(a * frame, 6), round(min(b * frame, end), 6), order.index(s)))
    return sorted(out, key=lambda t: (t[0], t[2]))


def test_diarizer_streams_turns_from_the_probabilities(gguf_path, audio, ref):
    from cera.audio import load_diarizer

    d = load_diarizer(gguf_path, threads=2)
    try:
        got, covered = [], []
        for at in range(0, len(audio), 3200):
            got += d.push(audio[at : at + 3200])
            covered.append(d.covered)
            assert all(t.end <= d.covered + 1e-9 for t in got)
        got += d.flush()
        assert covered == sorted(covered) and d.covered == pytest.approx(SECONDS)
        want = _turns_of(ref["streaming_audio"])
        assert sorted((round(t.start, 6), round(t.end, 6), t.speaker) for t in got) == sorted(want)
        assert want  # the random model does find "speech"
    finally:
        d.close()
    with pytest.raises(CeraError, match=r"threshold must be in \(0, 1\)"):
        load_diarizer(gguf_path, threshold=1.5)
    with pytest.raises(CeraError, match=r"unknown diarizer option\(s\) \['window_s'\]"):
        load_diarizer(gguf_path, window_s=2.0)


def test_live_against_nemo(model):
    """Where NeMo is installed: the stored .nemo restored by NeMo and run on another input
    (the first 6 s of three_voices) gives what the converted model gives."""
    pytest.importorskip("nemo.collections.asr")
    import torch
    from nemo.collections.asr.models import SortformerEncLabelModel

    from cera_audio_io import read_audio

    nemo = SortformerEncLabelModel.restore_from(str(NEMO), map_location="cpu")
    nemo.eval()
    x = read_audio(DATA / "three_voices.flac", 16000).samples[: 6 * 16000]
    with torch.no_grad():
        mel, n = nemo.process_signal(audio_signal=torch.from_numpy(x)[None], audio_signal_length=torch.tensor([len(x)]))
        mel = mel[:, :, : n.max()]
        emb, emb_len = nemo.frontend_encoder(processed_signal=mel, processed_signal_length=n)
        offline = nemo.forward_infer(emb, emb_len)[0].numpy()
        streaming = nemo.forward_streaming(mel, n)[0].numpy()
    mel = mel[0].T.numpy()
    np.testing.assert_allclose(model.offline(mel), offline, atol=PROB_ATOL, rtol=0)
    np.testing.assert_allclose(model.streaming(mel), streaming, atol=PROB_ATOL, rtol=0)


# -- the converter's refusals -----------------------------------------------------------


def _nemo_with(tmp_path, config: bytes | None = None, weights: bytes | None = None, name="m.nemo") -> Path:
    with tarfile.open(NEMO) as t:
        members = {m.name.rsplit("/", 1)[-1]: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}
    if config is not None:
        members["model_config.yaml"] = config
    if weights is not None:
        members["model_weights.ckpt"] = weights
    p = tmp_path / name
    with tarfile.open(p, "w") as t:
        for k, v in members.items():
            info = tarfile.TarInfo("./" + k)
            info.size = len(v)
            t.addfile(info, io.BytesIO(v))
    return p


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo owned",))


def test_converter_refusals(tmp_path):
    from cera_audio_diarizer.sortformer_convert import NemoError, convert_nemo

    junk = tmp_path / "junk.nemo"
    junk.write_bytes(b"\x00" * 100)
    with pytest.raises(NemoError, match="junk.nemo: not a .nemo archive"):
        convert_nemo(junk, tmp_path / "x.gguf")
    with tarfile.open(NEMO) as t:
        cfg = t.extractfile(next(m for m in t.getmembers() if m.name.endswith("model_config.yaml"))).read()
    other = cfg.replace(b"dw_striding", b"striding")
    with pytest.raises(NemoError, match="subsampling 'striding'"):
        convert_nemo(_nemo_with(tmp_path, config=other), tmp_path / "x.gguf")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps(_Evil(), protocol=2))
    with pytest.raises(CeraError, match=r"refers to (posix|os)\.system.*refused"):
        convert_nemo(_nemo_with(tmp_path, weights=buf.getvalue(), name="evil.nemo"), tmp_path / "x.gguf")
    assert not [p for p in os.listdir(tmp_path) if p.endswith((".gguf", ".tmp"))]


def test_diarize_convert_nemo_command(tmp_path, gguf_path):
    from click.testing import CliRunner

    from cera.formats.gguf import GGUFFile
    from cera_audio_diarizer.commands import diarize_convert_command

    out = tmp_path / "s.gguf"
    r = CliRunner().invoke(diarize_convert_command, [str(out), "--nemo", str(NEMO)])
    assert r.exit_code == 0, r.output
    assert out.read_bytes() == Path(gguf_path).read_bytes()  # the same conversion as the API's
    with GGUFFile(out) as g:
        assert g.architecture == "sortformer" and g.get("sortformer.streaming.spkcache_len") == 16
        assert g.get("sortformer.enc.layer_count") == 2 and g.get("sortformer.n_speakers") == 4
    r = CliRunner().invoke(diarize_convert_command, [str(out), "--nemo", str(NEMO), "--pt", "x.pt"])
    assert r.exit_code != 0 and "give one of them" in str(r.exception)


# -- cera diarize -m <Hub repository> ---------------------------------------------------


def cera(*args, env=None, check=True):
    env = {**os.environ, **(env or {})}
    env.pop("CERA_PLUGINS", None)
    proc = subprocess.run([sys.executable, "-m", "cera_cli.main", *map(str, args)], capture_output=True, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"cera {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr.decode()}")
    return proc


def test_cli_resolves_the_released_name_through_the_hub(tmp_path, gguf_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub"))
    from hub_server import HubServer

    from cera.audio import load_diarizer

    repo = "nvidia/diar_streaming_sortformer_4spk-v2.1"
    clip = tmp_path / "clip.flac"
    import soundfile as sf

    x, sr = sf.read(DATA / "two_voices.flac", dtype="float32")
    sf.write(clip, x[: int(SECONDS * sr)], sr)
    with HubServer() as server:
        server.add_commit(repo, {"diar_streaming_sortformer_4spk-v2.1.nemo": NEMO, "README.md": b"model card"})
        env = {"HF_ENDPOINT": server.url, "HF_HUB_CACHE": str(tmp_path / "hf"), "CERA_CACHE_DIR": str(tmp_path / "cera"),
               "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "0"}  # fmt: skip
        doc = json.loads(cera("diarize", "--audio", clip, "-m", repo, "--json", "--threads", 2, env=env).stdout)
        fetched = [r for r in server.requests() if ".nemo" in (r.get("path") or "")]
        assert fetched
    d = load_diarizer(gguf_path, threads=2)
    try:
        want = [t.to_json() for t in d.diarize(x[: int(SECONDS * sr)])]
    finally:
        d.close()
    assert doc["turns"] == want and doc["model"].endswith(".gguf")
    assert list((tmp_path / "cera" / "converted").glob("diar_streaming_sortformer_4spk-v2.1-*.gguf"))
