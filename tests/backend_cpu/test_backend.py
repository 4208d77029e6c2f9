"""The backend as a whole: plugin registration, construction (threads, variants, env
vars), errors on bad input, the GIL being released during kernels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from cera.errors import BackendUnavailable, CeraError, ModelConfigError, UnsupportedTensorType


def test_plugin_registers_the_backend():
    from packaging.specifiers import SpecifierSet

    import cera
    import cera_backend_cpu.plugin as plugin
    from cera.backend import OPS

    assert str(cera.PLUGIN_API_VERSION) in SpecifierSet(plugin.CERA_PLUGIN_API)
    got = []
    plugin.cera_register_backends(got.append)
    (spec,) = got
    assert spec.name == "cpu" and spec.factory == "cera_backend_cpu.backend:CpuBackend" and spec.priority == 0
    assert set(spec.ops) == set(OPS)
    assert set(spec.tensor_types) == {
        "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL",
        "IQ4_XS", "IQ3_S", "IQ3_XXS", "IQ2_S", "IQ2_XS", "IQ2_XXS", "IQ1_S", "IQ1_M",
    }  # fmt: skip
    assert spec.unavailable_reason() is None
    from cera.plugins.registry import load_factory
    from cera_backend_cpu.backend import CpuBackend

    assert load_factory(spec.factory) is CpuBackend


def test_cera_plugins_does_not_load_the_backend(tmp_path):
    """`cera plugins` lists the cpu backend without importing its implementation."""
    pytest.importorskip("cera_cli", reason="cera-cli is not installed")
    out = tmp_path / "mods.json"
    code = (
        "import json, sys\n"
        "from cera_cli.main import main\n"
        "try:\n    main(['plugins', '--json'])\nexcept SystemExit:\n    pass\n"
        f"json.dump(sorted(sys.modules), open({str(out)!r}, 'w'))\n"
    )
    env = dict(os.environ, CERA_PLUGINS="cpu")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.exists(), proc.stderr
    mods = set(json.loads(out.read_text()))
    assert "cera_backend_cpu.plugin" in mods  # it was discovered
    assert json.loads(proc.stdout)  # and listed
    assert "cpu" in proc.stdout
    for heavy in ("cera_backend_cpu.backend", "cera_backend_cpu._cpu", "cera_backend_cpu._native", "numpy", "cffi"):
        assert heavy not in mods, f"`cera plugins` imported {heavy}"


def test_default_threads_are_physical_cores(monkeypatch):
    from cera_backend_cpu.backend import CpuBackend

    monkeypatch.delenv("CERA_THREADS", raising=False)
    try:
        out = subprocess.run(["lscpu", "-p=CORE,SOCKET"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        pytest.skip("lscpu is not available to count physical cores independently")
    cores = {line for line in out.splitlines() if line and not line.startswith("#")}
    if not cores or len(os.sched_getaffinity(0)) != os.cpu_count():
        pytest.skip("cannot count the physical cores of this process independently")
    assert CpuBackend().threads == len(cores)


def test_threads_from_argument_and_environment(monkeypatch):
    from cera_backend_cpu.backend import CpuBackend

    assert CpuBackend(threads=3).threads == 3
    monkeypatch.setenv("CERA_THREADS", "1")
    assert CpuBackend().threads == 1
    monkeypatch.setenv("CERA_THREADS", "many")
    with pytest.raises(BackendUnavailable, match="CERA_THREADS"):
        CpuBackend()
    with pytest.raises(BackendUnavailable):
        CpuBackend(threads=0)


def test_variant_from_environment(monkeypatch):
    from cera_backend_cpu._native import compiled_variants
    from cera_backend_cpu.backend import CpuBackend

    monkeypatch.setenv("CERA_CPU_VARIANT", "scalar")
    assert CpuBackend(threads=1).variant == "scalar"
    monkeypatch.setenv("CERA_CPU_VARIANT", "sse9")
    with pytest.raises(BackendUnavailable, match="sse9.*scalar"):
        CpuBackend(threads=1)
    missing = [v for v in ("neon", "avx2") if v not in compiled_variants()]
    if missing:  # a variant of another architecture
        monkeypatch.setenv("CERA_CPU_VARIANT", missing[0])
        with pytest.raises(BackendUnavailable, match="not compiled"):
            CpuBackend(threads=1)


def test_probe(be):
    info = be.probe()
    assert info.usable and be.variant in info.device and info.memory_bytes > 0


def _gguf_with(tmp_path, tensors):
    import gguf

    path = tmp_path / "t.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    for name, (raw, qtype) in tensors.items():
        w.add_tensor(name, raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_unsupported_type_names_tensor_type_and_backend(be, tmp_path):
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    from cera.formats.gguf import GGUFFile

    bs, ts = GGML_QUANT_SIZES[GGMLQuantizationType.TQ1_0]
    raw = np.zeros((4, 2 * ts), np.uint8)  # 4 rows of 2 blocks: ne = (512, 4); ternary types are not served
    ok = np.zeros((4, 2 * 18), np.uint8)
    path = _gguf_with(tmp_path, {"blk.0.ffn_up.weight": (raw, GGMLQuantizationType.TQ1_0),
                                 "blk.0.ffn_down.weight": (ok, GGMLQuantizationType.Q4_0)})  # fmt: skip
    f = GGUFFile(path)
    assert be.upload(f, "blk.0.ffn_down.weight").ggml_type == "Q4_0"
    with pytest.raises(UnsupportedTensorType) as e:
        be.upload(f, "blk.0.ffn_up.weight")
    msg = str(e.value)
    assert "blk.0.ffn_up.weight" in msg and "TQ1_0" in msg and "'cpu'" in msg
    assert be.cannot_serve("TQ1_0") and be.cannot_serve("Q4_K") is None
    with pytest.raises(ModelConfigError, match="no tensor 'missing'"):
        be.upload(f, "missing")
    with pytest.raises(UnsupportedTensorType):
        be.weight("x", raw, "TQ1_0", shape=(512, 4))


def test_bad_shapes_and_ids_are_clear_errors(be):
    w = be.weight("w", np.ones((4, 8), np.float32))  # GGML (8, 4): 8 inputs, 4 outputs
    with pytest.raises(CeraError, match="8"):
        be.linear(np.ones((2, 5), np.float32), w)
    with pytest.raises(CeraError, match="outside the embedding table"):
        be.embedding(w, np.array([0, 4], np.int32))
    with pytest.raises(CeraError, match="rms_norm weight"):
        be.rms_norm(np.ones((2, 5), np.float32), w, 1e-6)
    with pytest.raises(CeraError):
        be.unary("tanh", np.ones(3, np.float32))
    with pytest.raises(CeraError):
        be.weight("q", np.zeros(17, np.uint8), "Q4_0", shape=(32, 1))


def test_weights_stay_memory_mapped(be, smollm2_path):
    from cera.formats.gguf import GGUFFile

    f = GGUFFile(smollm2_path)
    w = be.upload(f, "blk.0.ffn_up.weight")
    assert w.ggml_type == "Q4_1"
    assert not w.data.flags.writeable and not w.data.flags.owndata  # a view of the file's bytes
    assert w.data.nbytes == f.tensors["blk.0.ffn_up.weight"].nbytes


def test_kernels_release_the_gil():
    """While one thread is inside a long C call, another keeps running Python code: the
    largest pause the Python loop sees is a small part of the call's duration."""
    from cera_backend_cpu.backend import CpuBackend

    be = CpuBackend(threads=1)
    rng = np.random.default_rng(0)
    w = be.weight("w", rng.standard_normal((2048, 2048)).astype(np.float32))
    x = rng.standard_normal((96, 2048)).astype(np.float32)
    t0 = time.perf_counter()
    be.linear(x, w)
    rows = int(96 * min(50.0, 0.8 / max(time.perf_counter() - t0, 1e-4)))  # one call of most of a second
    x = rng.standard_normal((rows, 2048)).astype(np.float32)
    span = {}

    def work():
        span["start"] = time.perf_counter()
        be.linear(x, w)
        span["end"] = time.perf_counter()

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    try:
        th = threading.Thread(target=work)
        stamps = []
        th.start()
        while th.is_alive():
            stamps.append(time.perf_counter())
        th.join()
    finally:
        sys.setswitchinterval(old)
    inside = [t for t in stamps if span["start"] <= t <= span["end"]]
    duration = span["end"] - span["start"]
    points = [span["start"], *inside, span["end"]]
    largest_pause = max(b - a for a, b in zip(points, points[1:], strict=False))
    assert largest_pause < 0.5 * duration, f"Python stalled {largest_pause:.3f} s of a {duration:.3f} s C call"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_runs_without_the_parents_workers():
    """A fork()ed child inherits the backend but not its pool threads: it must compute
    alone instead of waiting for workers that do not exist (multiprocessing with fork)."""
    import warnings

    from cera_backend_cpu.backend import CpuBackend

    be = CpuBackend(threads=2)
    w = be.weight("w", np.ones((300, 1024), np.float32))  # large enough to use the pool
    x = np.ones((1, 1024), np.float32)
    assert be.linear(x, w)[0, 0] == 1024.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "fork() of a multi-threaded process"
        pid = os.fork()
    if pid == 0:  # child
        ok = be.linear(x, w)[0, 0] == 1024.0
        os._exit(0 if ok else 1)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung in the thread pool")
        time.sleep(0.05)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert be.linear(x, w)[0, 0] == 1024.0  # the parent's pool still works
