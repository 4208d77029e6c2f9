"""The pure pieces of benchmarks/bench_models_cli.py (bench_models.py's whole-process figures):
the decode/prefill arithmetic, the prompts, the parsers of the tools' JSON, the engines'
command lines and the peer's binaries. One real process is timed (a Python that sleeps).
No model is loaded and no engine's speed is asserted."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def cli():
    sys.path.insert(0, str(BENCH))
    try:
        import bench_models_cli

        yield bench_models_cli
    finally:
        sys.path.remove(str(BENCH))


def test_decode_and_prefill_come_from_differences_of_whole_processes(cli):
    T = cli.ProcessTiming
    # start-up 1.0 s; 2 ms per decoded token; the long prompt's 500 more tokens in 0.25 s
    samples = {
        "short_1": [T(1.0, 0.9, 0.1), T(1.2, 1.0, 0.1)],
        "short_n": [T(1.0 + 0.256, 0.9 + 0.512, 0.1), T(1.2 + 0.256, 1.0 + 0.512, 0.1)],
        "long_1": [T(1.25, 1.4, 0.1), T(1.45, 1.5, 0.1)],
    }
    fig = cli.derive(samples, n_decode=128, n_short=12, n_long=512)
    w, u = fig["wall"], fig["user"]
    assert w["decode_ms_per_token"]["median"] == pytest.approx(2.0)
    assert w["decode_tok_s"]["median"] == pytest.approx(500.0)
    assert w["prefill_tok_s"]["median"] == pytest.approx(500 / 0.25)
    assert u["decode_ms_per_token"]["median"] == pytest.approx(4.0)  # two threads busy
    assert u["prefill_tok_s"]["median"] == pytest.approx(500 / 0.5)
    assert w["process_s_short_1"]["min"] == 1.0 and w["process_s_short_1"]["max"] == 1.2


def test_a_long_prompt_no_slower_than_the_short_one_gives_no_prefill_figure(cli):
    T = cli.ProcessTiming
    samples = {"short_1": [T(1.0, 1.0, 0)], "short_n": [T(1.5, 1.5, 0)], "long_1": [T(0.9, 0.9, 0)]}
    assert math.isnan(cli.derive(samples, 128, 10, 500)["wall"]["prefill_tok_s"]["median"])


def test_the_long_prompt_reaches_the_asked_token_count(cli):
    count = lambda text: len(text.split()) + 1  # noqa: E731 - a word per token, and a start token
    short, long_, n_short, n_long = cli.prompts(count, long_tokens=200)
    assert long_.startswith(short) and n_short == count(short) < 20
    assert 200 <= n_long < 200 + 17


def test_the_tools_json_is_read(cli):
    llama_bench = [
        {"n_prompt": 512, "n_gen": 0, "avg_ts": 301.5, "avg_ns": 1},
        {"n_prompt": 0, "n_gen": 128, "avg_ts": 99.25, "avg_ns": 1},
    ]
    assert cli.parse_llama_bench("main: log line\n" + json.dumps(llama_bench)) == {"pp512": 301.5, "tg128": 99.25}
    cera_bench = {"model": "m", "results": [{"test": "pp512", "median_tok_s": 900.0}, {"test": "tg128", "median_tok_s": 120.0}]}
    assert cli.parse_cera_bench(json.dumps(cera_bench)) == {"pp512": 900.0, "tg128": 120.0}


def test_every_engine_gets_the_same_file_prompt_count_threads_and_context(cli, tmp_path):
    engines = [cli.cera_cli(), cli.llama_cpp_cli(), cli.ik_llama_cli("/x/llama-cli", ["-rtr", "1"])]
    for e in engines:
        argv = e.argv("/m.gguf", "/p.txt", "text", 129, 2, 700)
        joined = " ".join(argv)
        assert "/m.gguf" in argv and "/p.txt" in argv and "129" in argv and "700" in argv, joined
    cera, _, ik = (e.argv("/m.gguf", "/p.txt", "text", 129, 2, 700) for e in engines)
    assert "--ignore-eos" in cera and "--raw" in cera and cera[cera.index("--temp") + 1] == "0"
    assert "--ignore-eos" in ik and ik[-2:] == ["-rtr", "1"]


def test_the_peer_binaries_are_found_beside_each_other(cli, tmp_path):
    for name in ("llama-bench", "llama-cli"):
        f = tmp_path / name
        f.write_text("#!/bin/sh\n")
        f.chmod(0o755)
    found = cli.peer_binaries(str(tmp_path / "llama-bench"))
    assert found == {"llama-bench": str(tmp_path / "llama-bench"), "llama-cli": str(tmp_path / "llama-cli")}
    (tmp_path / "llama-cli").unlink()
    assert cli.peer_binaries(str(tmp_path))["llama-cli"] is None
    (tmp_path / "llama-bench").unlink()
    with pytest.raises(FileNotFoundError, match="build_ik_llama.sh"):
        cli.peer_binaries(str(tmp_path))


def test_a_process_is_timed_with_its_own_cpu_time(cli):
    t = cli.run_process([sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass"])
    assert t.wall >= t.user + t.system >= 0.15
    with pytest.raises(RuntimeError, match="exited with 3"):
        cli.run_process([sys.executable, "-c", "import sys; sys.exit(3)"])
