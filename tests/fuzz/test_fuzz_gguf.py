"""GGUF files mutated in every part (header, metadata, hyperparameters, tokenizer tables,
templates, tensor index, tensor data, raw bytes), each through what cera does with a file,
in a child process under a time and memory limit. Any outcome but a clean run or a
`CeraError` fails the test, naming the case number that reproduces the file.

Three depths: "run" (load on the CPU backend, tokenize, render the template, generate
greedy and sampled tokens: the tiny models of tests/models/reference/tiny, so real tensor
data goes through the C kernels), "inspect" (what `cera inspect` reports) and "open" (the
reader alone, on small files and on the header of a real model).
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize
from gguf_mutate import Doc, mutate, parse
from harness import REPO, Tally, case_numbers
from templates import CORPUS

TINY = sorted((REPO / "tests" / "models" / "reference" / "tiny").glob("*.gguf"))
# CI counts (a few hundred cases in all) and --run-slow counts (20,000 and more)
COUNTS = {"run": (120, 9000), "inspect": (60, 3000), "open": (90, 9000)}
TIMEOUT_S = {"run": 60, "inspect": 30, "open": 10}


def write_small(path: Path, variant: int) -> None:
    rng = np.random.default_rng(variant)
    w = GGUFWriter(str(path), "llama")
    w.add_uint32("llama.block_count", 1)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", ["<unk>", "<s>", "</s>", "a", "b", "ab"])
    w.add_array("tokenizer.ggml.scores", [0.0, 0.0, 0.0, -1.0, -2.0, -0.5])
    w.add_array("tokenizer.ggml.token_type", [2, 3, 3, 1, 1, 1])
    w.add_tensor("a", rng.standard_normal((2, 4)).astype(np.float32))
    w.add_tensor("b", rng.standard_normal(16).astype(np.float16))
    w.add_tensor(
        "q", quantize(rng.standard_normal((2, 32)).astype(np.float32), GGMLQuantizationType.Q8_0),
        raw_dtype=GGMLQuantizationType.Q8_0,
    )  # fmt: skip
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def seeds(tmp_path_factory, smollm2_path) -> dict[str, list[tuple[str, Doc]]]:
    folder = tmp_path_factory.mktemp("seeds")
    small = []
    for variant in (0, 1):
        p = folder / f"small{variant}.gguf"
        write_small(p, variant)
        small.append((p.stem, parse(p)))
    tiny = [(p.stem, parse(p)) for p in TINY]
    # The real SmolLM2 file's header and vocabulary, with its tensor data cut off: the reader
    # parses every table, then refuses (or accepts, when mutations shrink the tensors).
    real = parse(Path(smollm2_path))
    real.data = real.data[:4096]
    return {"run": tiny, "inspect": tiny, "open": small + tiny[:3] + [("smollm2-header", real)]}


@pytest.mark.parametrize("mode", ["run", "inspect", "open"])
def test_mutated_gguf_files(request, pool, seeds, tmp_path, mode):
    run_slow = request.config.getoption("--run-slow")
    ci, slow = COUNTS[mode]
    offset = {"run": 0, "inspect": 1_000_000, "open": 2_000_000}[mode]
    numbers = case_numbers(ci, slow, run_slow, offset)
    tally = Tally(f"gguf-{mode}")
    batch = 200
    for lo in range(numbers.start, numbers.stop, batch):
        cases, files = [], []
        for n in range(lo, min(lo + batch, numbers.stop)):
            label, seed = seeds[mode][n % len(seeds[mode])]
            data, what = mutate(seed, n, CORPUS, data_mutations=mode != "open" or random.Random(n).random() < 0.5)
            path = tmp_path / f"case-{n}.gguf"
            path.write_bytes(data)
            files.append(path)
            cases.append({"kind": "gguf", "mode": mode, "path": str(path), "timeout": TIMEOUT_S[mode], "case": n,
                          "seed": label, "what": what})  # fmt: skip
        for case, result, path in zip(cases, pool.run(cases), files, strict=True):
            tally.add(case, result, keep=path)
            path.unlink()
    tally.check()
