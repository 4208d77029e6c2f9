"""The pure-Python pieces of benchmarks/bench_models.py: test parsing, arguments, the
alternation schedule, statistics, tables, the weight-bytes rule and the kernel-timing
proxy. No model is loaded and no speed is asserted."""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def bm():
    sys.path.insert(0, str(BENCH))
    try:
        import bench_models

        yield bench_models
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def overhead(bm):
    import bench_models_overhead

    return bench_models_overhead


# -- tests and arguments ---------------------------------------------------------------------


def test_parse_tests_names_and_sizes(bm):
    tests = bm.parse_tests("pp128, pp512,tg128,tg128@d512,pp64@d32")
    assert [(t.kind, t.n, t.depth) for t in tests] == [
        ("pp", 128, 0),
        ("pp", 512, 0),
        ("tg", 128, 0),
        ("tg", 128, 512),
        ("pp", 64, 32),
    ]
    assert [t.name for t in tests] == ["pp128", "pp512", "tg128", "tg128@d512", "pp64@d32"]
    # context: depth + timed tokens; largest batch: the depth prefix or the pp batch (tg: 1)
    assert [t.n_ctx for t in tests] == [128, 512, 128, 640, 96]
    assert [t.batch for t in tests] == [128, 512, 1, 512, 64]


@pytest.mark.parametrize("bad", ["pp", "tg12x", "xx128", "pp0", "tg128@512", "pp128,pp128", ""])
def test_parse_tests_rejects(bm, bad):
    with pytest.raises(ValueError):
        bm.parse_tests(bad)


def test_parse_args_defaults(bm):
    args = bm.parse_args([])
    assert args.models == list(bm.DEFAULT_MODELS) and len(args.models) == 4
    assert args.threads == 2 and args.reps == 5 and args.warmup == 1
    assert [t.name for t in args.tests] == ["pp128", "pp512", "tg128", "tg128@d512"]
    assert args.json_out is None
    assert args.omp_wait_policy == "default"  # llama.cpp's own default unless asked


def test_parse_args_values(bm):
    args = bm.parse_args(["--model", "a.gguf", "--model", "b", "--threads", "1", "--reps", "3",
                          "--tests", "tg16", "--json", "out.json", "--overhead-tokens", "0"])  # fmt: skip
    assert args.models == ["a.gguf", "b"]
    assert (args.threads, args.reps, args.json_out, args.overhead_tokens) == (1, 3, "out.json", 0)
    assert [t.name for t in args.tests] == ["tg16"]


@pytest.mark.parametrize(
    "argv", [["--reps", "0"], ["--threads", "0"], ["--tests", "tg"], ["--warmup", "-1"], ["--omp-wait-policy", "spin"]]
)
def test_parse_args_errors(bm, argv, capsys):
    with pytest.raises(SystemExit) as exc:
        bm.parse_args(argv)
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


# -- schedule -----------------------------------------------------------------------------------


def test_schedule_alternates_after_warmup(bm):
    runs = bm.alternation_schedule(["A", "B"], reps=3, warmup=1)
    assert [(r.engine, r.rep, r.timed) for r in runs] == [
        ("A", 0, False), ("B", 0, False),
        ("A", 0, True), ("B", 0, True), ("A", 1, True), ("B", 1, True), ("A", 2, True), ("B", 2, True),
    ]  # fmt: skip


def test_schedule_counts(bm):
    runs = bm.alternation_schedule(["cera", "llama.cpp"], reps=5, warmup=2)
    timed = [r for r in runs if r.timed]
    assert len(runs) == 14 and len(timed) == 10
    assert all(not r.timed for r in runs[:4])
    # no engine ever runs twice in a row
    assert all(a.engine != b.engine for a, b in zip(runs, runs[1:], strict=False))
    assert bm.alternation_schedule(["A", "B"], reps=2, warmup=0)[0].timed


# -- statistics ---------------------------------------------------------------------------------


def test_summarize_against_hand_values(bm):
    s = bm.summarize([5.0, 1.0, 4.0, 2.0, 3.0])
    assert (s.n, s.median, s.mean, s.min, s.max) == (5, 3.0, 3.0, 1.0, 5.0)
    assert s.stdev == pytest.approx(math.sqrt(2.5))  # sum of squares 10 over n-1 = 4
    assert (s.q1, s.q3, s.iqr) == (2.0, 4.0, 2.0)


def test_summarize_quartiles_match_numpy(bm):
    rng = np.random.default_rng(3)
    for n in (2, 4, 7, 10):
        values = rng.uniform(10, 50, n).tolist()
        s = bm.summarize(values)
        q1, med, q3 = np.percentile(values, [25, 50, 75])  # numpy's linear method = "inclusive"
        assert (s.q1, s.median, s.q3) == pytest.approx((q1, med, q3))
        assert s.stdev == pytest.approx(np.std(values, ddof=1))


def test_summarize_single_and_empty(bm):
    s = bm.summarize([7.5])
    assert (s.median, s.stdev, s.iqr) == (7.5, 0.0, 0.0)
    with pytest.raises(ValueError):
        bm.summarize([])


def test_rates_and_paired_ratios(bm):
    assert bm.tokens_per_second(128, [2.0, 0.5]) == [64.0, 256.0]
    assert bm.paired_ratios([10.0, 30.0], [20.0, 15.0]) == [0.5, 2.0]
    with pytest.raises(ValueError):
        bm.paired_ratios([1.0], [1.0, 2.0])


# -- tables -------------------------------------------------------------------------------------


def test_markdown_table_layout(bm):
    text = bm.markdown_table(["model", "tok/s"], [["a", "1.0"], ["longer-name", "123.45"]])
    lines = text.splitlines()
    assert lines == [
        "| model       |  tok/s |",
        "|:------------|-------:|",
        "| a           |    1.0 |",
        "| longer-name | 123.45 |",
    ]


def _result(bm):
    cera = bm.summarize([40.0, 42.0, 44.0]).as_dict()
    llama = bm.summarize([80.0, 81.0, 88.0]).as_dict()
    ratios = bm.summarize(bm.paired_ratios([40.0, 42.0, 44.0], [80.0, 81.0, 88.0])).as_dict()
    return {"test": "tg128", "cera": cera, "llama.cpp": llama, "ratio": 42.0 / 81.0, "paired_ratio": ratios,
            "cpu_share_median": {"cera": 0.97, "llama.cpp": 1.0}}  # fmt: skip


def test_speed_row(bm):
    row = bm.speed_row("m", _result(bm))
    assert len(row) == len(bm.SPEED_HEADER)
    # medians 42 and 81, sample stdevs 2 and sqrt(19), ratio 0.5185..., paired ratios 0.5, 0.5185, 0.5
    assert row == ["m", "tg128", "42.0", "2.0", "81.0", "4.4", "0.52", "0.50–0.51", "0.97/1.00", "n/a"]
    row = bm.speed_row("m", {**_result(bm), "loadavg_1min": [1.52, 1.1, 1.8]})
    assert row[-1] == "1.10–1.80"  # the 1-minute load average's range over the test


def test_extra_row_with_and_without_overhead(bm):
    extra = {
        "bandwidth": {
            "weight_bytes": 96_576_768,
            "read_bw_gb_s": 5.0,
            "cera": {"gb_s": 3.5, "fraction": 0.7},
            "llama.cpp": {"gb_s": 4.0, "fraction": 0.8},
        },
        "overhead": {
            "available": True,
            "overhead_ms": 2.345,
            "overhead_fraction": 0.094,
            "kernel_calls_per_token": 393.0,
        },
    }
    assert bm.extra_row("m", extra) == ["m", "96.6", "5.00", "3.50", "70", "4.00", "80", "2.35", "9.4", "393"]
    extra["overhead"] = {"available": False, "reason": "x"}
    del extra["bandwidth"]
    assert bm.extra_row("m", extra) == ["m"] + ["n/a"] * 9


def test_test_ids_shared_and_sized(bm):
    t = bm.parse_tests("tg16@d32")[0]
    prefix, ids = bm.test_ids(1234, "a.gguf", t, 1000)
    assert len(prefix) == 32 and len(ids) == 16
    assert all(0 <= i < 1000 for i in prefix + ids)
    assert bm.test_ids(1234, "a.gguf", t, 1000) == (prefix, ids)  # same ids every call: both engines get them
    assert bm.test_ids(1234, "b.gguf", t, 1000) != (prefix, ids)


# -- weight bytes per decoded token ---------------------------------------------------------------


def _write_gguf(path, names_shapes):
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    for name, shape in names_shapes:
        writer.add_tensor(name, np.zeros(shape, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_decode_weight_bytes_rule(bm, tmp_path):
    from bench_models_memory import decode_weight_bytes

    # untied: the embedding (one row read per token) is left out, output.weight counted
    untied = tmp_path / "untied.gguf"
    _write_gguf(untied, [("token_embd.weight", (100, 8)), ("blk.0.attn_q.weight", (8, 8)),
                         ("output_norm.weight", (8,)), ("output.weight", (100, 8))])  # fmt: skip
    r = decode_weight_bytes(untied)
    assert r["bytes"] == 4 * (64 + 8 + 800) and r["output"] == "output.weight"
    assert r["file_tensor_bytes"] == 4 * (800 + 64 + 8 + 800)
    # tied: no output.weight, the embedding is the output matrix and is read in full
    tied = tmp_path / "tied.gguf"
    _write_gguf(tied, [("token_embd.weight", (100, 8)), ("blk.0.attn_q.weight", (8, 8)), ("output_norm.weight", (8,))])
    r = decode_weight_bytes(tied)
    assert r["bytes"] == 4 * (800 + 64 + 8) and r["output"].startswith("token_embd")


# -- the kernel-timing proxy -----------------------------------------------------------------------


def test_timed_lib_counts_and_times(overhead):
    def work(x, y):
        return x + y

    records = {}
    proxy = overhead.TimedLib(types.SimpleNamespace(work=work, constant=7), records)
    assert proxy.constant == 7  # non-callables pass through
    assert proxy.work(2, 3) == 5 and proxy.work(1, 1) == 2
    assert records["work"].calls == 2 and records["work"].seconds >= 0.0
    assert proxy.work is proxy.work  # wrapper made once, then a plain attribute


def test_proxy_unavailable_when_package_missing(overhead):
    timer = overhead.KernelTimer(package="no_such_backend_package")
    with pytest.raises(overhead.ProxyUnavailable, match="not imported"):
        timer.install()


def test_proxy_sees_backend_kernel_calls_and_restores(overhead):
    """On the real CPU backend: one rms_norm op is one timed kernel call, and uninstalling
    puts the original lib back. If this fails, the overhead figure is n/a in the report."""
    backend_mod = pytest.importorskip("cera_backend_cpu.backend", reason="cera-backend-cpu is not installed")
    original = backend_mod.lib
    backend = backend_mod.CpuBackend(threads=1)
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    expected = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)
    timer = overhead.KernelTimer()
    with timer:
        assert backend_mod.lib is not original
        y = backend.rms_norm(x, None, 1e-6)
    assert backend_mod.lib is original
    np.testing.assert_allclose(y, expected, rtol=1e-5)  # the proxied call still did the work
    assert timer.records["cera_rms_norm"].calls == 1
    assert timer.calls == 1
    backend.close()


def test_calibration_figures_are_positive(overhead):
    lib = types.SimpleNamespace()  # no argument-free lib function: falls back to abs()
    cal = overhead.calibrate(lib, n=2000, repeat=2)
    assert cal["calibrated_on"].startswith("abs")
    assert cal["inside_floor_per_call_s"] > 0 and cal["proxy_cost_per_call_s"] >= 0 and cal["direct_call_s"] > 0
