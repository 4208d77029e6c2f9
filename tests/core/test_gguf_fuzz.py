"""The GGUF reader on mutated files: hypothesis flips bytes, truncates, and overwrites the
counts, lengths, type ids, dimensions and offsets of real headers.

Whatever the input, opening a file must either succeed (and then every tensor view must
lie inside the file) or raise `InvalidModelFile` carrying the path, a byte offset inside
the file and a reason. Never another exception, never a hang (a timer and hypothesis'
deadline watch every example), never an allocation out of proportion to the file
(tracemalloc's peak, bounded by a small multiple of the file size).

Seeds: small files written with `gguf.GGUFWriter`, and the first 256 KiB of the real
SmolLM2 file (its header: metadata and the start of the vocabulary). Where the length,
count and type fields sit is taken from `gguf.GGUFReader`, the format's reference reader,
so mutations can aim at exactly the fields a hostile file would lie in.
"""

from __future__ import annotations

import contextlib
import signal
import tempfile
import tracemalloc
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import quantize
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cera.errors import InvalidModelFile
from cera.formats.gguf import GGUFFile

SMOLLM2_PREFIX = 256 * 1024
MEMORY_FACTOR = 16  # peak allocation allowed per byte of file ...
MEMORY_SLACK = 1 << 20  # ... plus this much for the parser's own fixed needs
TIME_LIMIT_S = 30  # per example: only a hang gets near it

FUZZ = settings(
    max_examples=200,
    deadline=timedelta(seconds=10),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

INTERESTING = [0, 1, 2, 3, 4, 5, 7, 8, 12, 13, 24, 31, 32, 33, 63, 64, 255, 256, 1 << 16, (1 << 31) - 1, 1 << 31]
INTERESTING += [(1 << 32) - 1, 1 << 32, (1 << 62), (1 << 63) - 1, 1 << 63, (1 << 64) - 32, (1 << 64) - 1]


class Seed:
    def __init__(self, label: str, data: bytes, fields: list[tuple[int, int]]):
        self.label = label
        self.data = data
        # (byte position, size in bytes) of every scalar field: counts, lengths, type ids,
        # dimensions, offsets, scalar values. Only those inside `data`.
        self.fields = [(p, n) for p, n in fields if p + n <= len(data)]


def field_positions(path) -> list[tuple[int, int]]:
    """Where the reference reader found each scalar field of the header."""
    reader = GGUFReader(path)
    base = reader.data.__array_interface__["data"][0]
    out = []
    fields = list(reader.fields.values()) + [t.field for t in reader.tensors]
    for field in fields:
        for part in field.parts:
            if part.size == 1 and part.itemsize in (1, 2, 4, 8):
                out.append((part.__array_interface__["data"][0] - base, part.itemsize))
    return sorted(set(out))


def write_small(path, variant: int) -> None:
    rng = np.random.default_rng(variant)
    w = GGUFWriter(str(path), f"fuzz{variant}")
    if variant == 1:
        w.add_custom_alignment(64)
    w.add_uint32("fuzz.block_count", 2)
    w.add_float32("fuzz.eps", 1e-5)
    w.add_bool("fuzz.flag", True)
    w.add_string("fuzz.name", "seed")
    w.add_array("fuzz.tokens", ["<s>", "a", "bc", "déf"])
    w.add_array("fuzz.scores", [0.0, -1.5, 2.25, 3.0])
    w.add_array("fuzz.types", [1, 2, 3, 1])
    w.add_tensor("a", rng.standard_normal((2, 4)).astype(np.float32))
    w.add_tensor("b", rng.standard_normal(16).astype(np.float16))
    w.add_tensor("q", quantize(rng.standard_normal((2, 32)).astype(np.float32), GGMLQuantizationType.Q8_0), raw_dtype=GGMLQuantizationType.Q8_0)
    if variant == 1:
        w.add_tensor("k", quantize(rng.standard_normal((1, 256)).astype(np.float32), GGMLQuantizationType.Q4_0), raw_dtype=GGMLQuantizationType.Q4_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def small_seeds(tmp_path_factory) -> list[Seed]:
    seeds = []
    for variant in (0, 1):
        p = tmp_path_factory.mktemp("seeds") / f"small{variant}.gguf"
        write_small(p, variant)
        data = p.read_bytes()
        GGUFFile(p).close()  # the seed itself is valid
        seeds.append(Seed(f"small{variant}", data, field_positions(p)))
    return seeds


@pytest.fixture(scope="module")
def smollm2_seed(smollm2_path) -> Seed:
    with open(smollm2_path, "rb") as f:
        data = f.read(SMOLLM2_PREFIX)
    return Seed("smollm2-prefix", data, field_positions(smollm2_path))


# -- mutations ------------------------------------------------------------------------------


def values():
    return st.one_of(st.sampled_from(INTERESTING), st.integers(0, (1 << 64) - 1))


@st.composite
def mutated(draw, seeds: list[Seed]) -> tuple[str, bytes]:
    seed = draw(st.sampled_from(seeds))
    data = bytearray(seed.data)
    n = len(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["field", "field", "word", "byte", "splice"]))
        if kind == "field" and seed.fields:
            pos, size = draw(st.sampled_from(seed.fields))
            v = draw(values()) & ((1 << (8 * size)) - 1)
            data[pos : pos + size] = v.to_bytes(size, "little")
        elif kind == "word":
            size = draw(st.sampled_from([4, 8]))
            pos = draw(st.integers(0, n - size))
            data[pos : pos + size] = (draw(values()) & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
        elif kind == "splice":  # delete or duplicate a run of bytes, shifting what follows
            a = draw(st.integers(0, n - 1))
            b = draw(st.integers(a, min(n, a + 64)))
            data[a:b] = b"" if draw(st.booleans()) else data[a:b] * 2
            n = len(data)
        else:
            pos = draw(st.integers(0, n - 1))
            data[pos] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return seed.label, bytes(data)


# -- the property ---------------------------------------------------------------------------


@contextlib.contextmanager
def time_limit(seconds: int):
    """Turn a hang into a failure (hypothesis' deadline only measures examples that end)."""

    def on_alarm(signum, frame):
        raise TimeoutError(f"parsing took longer than {seconds} s: the parser hangs on this input")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


_scratch = Path(tempfile.mkdtemp(prefix="cera-gguf-fuzz-"))


def check_open(data: bytes) -> None:
    path = _scratch / "mutated.gguf"
    path.write_bytes(data)
    tracemalloc.start()
    try:
        with time_limit(TIME_LIMIT_S):
            try:
                g = GGUFFile(path)
            except InvalidModelFile as e:
                assert e.path == str(path)
                assert isinstance(e.offset, int) and 0 <= e.offset <= len(data), e
                assert e.reason and e.reason in str(e)
                return
            with g:
                for name, info in g.tensors.items():
                    assert 0 <= info.offset and info.offset + info.nbytes <= len(data), name
                    assert g.tensor_data(name).nbytes == info.nbytes, name
                try:
                    assert isinstance(g.architecture, str)
                except InvalidModelFile:
                    pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak <= MEMORY_FACTOR * len(data) + MEMORY_SLACK, f"peak allocation {peak} for a {len(data)}-byte file"


@FUZZ
@given(data=st.data())
def test_mutated_small_files(small_seeds, data):
    label, content = data.draw(mutated(small_seeds), label="mutated file")
    check_open(content)


@settings(FUZZ, max_examples=60)
@given(data=st.data())
def test_mutated_smollm2_header(smollm2_seed, data):
    label, content = data.draw(mutated([smollm2_seed]), label="mutated file")
    check_open(content)


@FUZZ
@given(content=st.binary(min_size=0, max_size=512))
def test_random_bytes_after_a_valid_magic(content):
    check_open(b"GGUF" + content)


@pytest.mark.parametrize("variant", [0, 1])
def test_every_truncation_of_a_small_file(small_seeds, variant):
    """Exhaustive rather than sampled: every prefix of a valid file is rejected cleanly."""
    data = small_seeds[variant].data
    for cut in range(len(data)):
        check_open(data[:cut])


@pytest.mark.parametrize("variant", [0, 1])
def test_every_field_set_to_every_interesting_value(small_seeds, variant):
    """Exhaustive over the fields the reference reader located, with the boundary values."""
    seed = small_seeds[variant]
    for pos, size in seed.fields:
        for v in INTERESTING:
            data = bytearray(seed.data)
            data[pos : pos + size] = (v & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
            check_open(bytes(data))
