"""Regression tests from reproductions of hostile model files, and from what the fuzz
harness found. Each builds a variant of a tiny real model (tests/models/reference/tiny) and
checks the exact outcome: a `CeraError` of the right class naming the key and values, or a
generation that ends with finish reason ERROR naming the step; never another exception or
a hang.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf.constants import GGUFValueType
from gguf_mutate import KV, parse, serialize
from harness import REPO

import cera
from cera.errors import CeraError, InvalidModelFile, ModelConfigError
from cera.generation.sink import CollectingSink, FinishReason

TINY = REPO / "tests" / "models" / "reference" / "tiny"
SEED = TINY / "tiny-mistral.gguf"  # llama: 3 layers, 64 wide, 4 heads (2 KV) of 16, vocabulary 512
REGRESSIONS = Path(__file__).resolve().parent / "regressions"


def variant(tmp_path: Path, *, kv: dict | None = None, dims: dict | None = None, nan_tensor: str | None = None,
            seed: Path = SEED) -> Path:  # fmt: skip
    doc = parse(seed)
    for key, value in (kv or {}).items():
        entry = doc.kv(key)
        vtype = GGUFValueType.FLOAT32 if isinstance(value, float) else (
            GGUFValueType.UINT64 if value >= 1 << 32 else GGUFValueType.UINT32
        )  # fmt: skip
        if entry is None:
            doc.kvs.append(KV(key, vtype, value))
        else:
            entry.vtype, entry.value = vtype, value
    for name, new in (dims or {}).items():
        next(t for t in doc.tensors if t.name == name).dims = list(new)
    if nan_tensor:
        t = next(t for t in doc.tensors if t.name == nan_tensor)
        n = int(np.prod(t.dims))
        doc.data[t.offset : t.offset + 4 * n] = np.full(n, np.nan, np.float32).tobytes()
    path = tmp_path / "variant.gguf"
    path.write_bytes(serialize(doc)[0])
    return path


def load_error(path: Path) -> CeraError:
    with pytest.raises(CeraError) as info:
        m = cera.load(path, device="cpu", threads=1)
        try:
            s = m.new_session(n_ctx=64)
            s.append_text("Hello")
            s.generate(max_tokens=2, temperature=0)
        finally:
            m.close()
    return info.value


CONFIG_CASES = {
    "head count 0": ({"llama.attention.head_count": 0}, r"llama\.attention\.head_count \(0\)"),
    "KV heads that do not divide the heads": (
        {"llama.attention.head_count_kv": 3},
        r"llama\.attention\.head_count \(4\) attention heads cannot be grouped onto llama\.attention\.head_count_kv \(3\)",
    ),
    "more heads than the width": (
        {"llama.attention.head_count": 128, "llama.attention.head_count_kv": 128},
        r"do not fit its tensors.*llama\.attention\.head_count=128",
    ),
    "head counts that do not match the tensor shapes": (
        {"llama.attention.head_count": 8, "llama.attention.head_count_kv": 8},
        r"do not fit its tensors.*llama\.attention\.head_count=8",
    ),
    "zero embedding length": ({"llama.embedding_length": 0}, r"llama\.embedding_length \(0\)"),
    "zero feed-forward length": ({"llama.feed_forward_length": 0}, r"llama\.feed_forward_length is 0"),
    "context length 2^31": ({"llama.context_length": 1 << 31}, r"llama\.context_length is 2147483648"),
    "context length 2^63": ({"llama.context_length": 1 << 63}, r"llama\.context_length is 9223372036854775808"),
    "more layers than tensors": ({"llama.block_count": 1 << 32}, r"llama\.block_count is 4294967296, but the file"),
    "layers without tensors": ({"llama.block_count": 9}, r"required tensor 'blk\.3\."),
    "NaN RoPE base": ({"llama.rope.freq_base": float("nan")}, r"llama\.rope\.freq_base is nan"),
    "zero RoPE base": ({"llama.rope.freq_base": 0.0}, r"llama\.rope\.freq_base is 0\.0; it must be positive"),
    "negative RMS epsilon": (
        {"llama.attention.layer_norm_rms_epsilon": -1.0},
        r"llama\.attention\.layer_norm_rms_epsilon is -1\.0",
    ),
    "infinite RMS epsilon": ({"llama.attention.layer_norm_rms_epsilon": float("inf")}, r"is inf; it must be a finite"),
    "odd RoPE dimensions": ({"llama.rope.dimension_count": 15}, r"llama\.rope\.dimension_count is 15"),
    "RoPE wider than a head": ({"llama.rope.dimension_count": 64}, r"llama\.rope\.dimension_count is 64"),
    "key length 0": ({"llama.attention.key_length": 0}, r"a head dimension of 0"),
    "key length that does not match the tensors": (
        {"llama.attention.key_length": 8, "llama.attention.value_length": 8, "llama.rope.dimension_count": 8},
        r"do not fit its tensors.*llama\.attention\.key_length=8",
    ),
}


@pytest.mark.parametrize("case", CONFIG_CASES.values(), ids=CONFIG_CASES.keys())
def test_inconsistent_hyperparameters_are_refused_at_load_naming_the_key(tmp_path, case):
    kv, match = case
    err = load_error(variant(tmp_path, kv=kv))
    assert isinstance(err, (ModelConfigError, InvalidModelFile)), repr(err)
    assert re.search(match, str(err)), str(err)


SHAPE_CASES = {
    "a zero-sized dimension": {"blk.0.attn_q.weight": [64, 0]},
    "a norm of the wrong length": {"blk.1.attn_norm.weight": [32]},
    "a matrix with a third dimension": {"blk.0.attn_output.weight": [64, 64, 1]},
    "swapped dimensions": {"blk.0.ffn_down.weight": [64, 128]},
    "an output head narrower than the vocabulary": {"output.weight": [64, 511]},
    "an embedding table shorter than the vocabulary": {"token_embd.weight": [64, 500]},
}


@pytest.mark.parametrize("dims", SHAPE_CASES.values(), ids=SHAPE_CASES.keys())
def test_tensor_shapes_that_do_not_fit_are_refused_at_load(tmp_path, dims):
    err = load_error(variant(tmp_path, dims=dims))
    assert isinstance(err, (ModelConfigError, InvalidModelFile)), repr(err)


@pytest.mark.parametrize("seed", ["tiny-lfm2", "tiny-gemma2", "tiny-olmo2"])
def test_a_sliding_window_of_2_to_the_31_is_refused(tmp_path, seed):
    """Found by the fuzzer (slow run, tiny-lfm2): the window reached the CPU backend's
    compiler as an int32 and overflowed there, at the first token."""
    path = TINY / f"{seed}.gguf"
    arch = parse(path).arch
    err = load_error(variant(tmp_path, kv={f"{arch}.attention.sliding_window": 1 << 31}, seed=path))
    assert isinstance(err, ModelConfigError)
    assert "2147483648" in str(err) and "[1, 2^31)" in str(err)


def test_corrupted_weights_end_generation_with_an_error_naming_the_step(tmp_path):
    """Reproduction: NaN logits went unnoticed (greedy stopped silently or repeated a token;
    sampling raised a bare ValueError)."""
    path = variant(tmp_path, nan_tensor="output_norm.weight")
    m = cera.load(path, device="cpu", threads=1)
    try:
        for options in ({"temperature": 0}, {"temperature": 0.8, "seed": 3}, {"temperature": 0, "logprobs": True}):
            s = m.new_session(n_ctx=64)
            s.append_text("Hello")
            sink = CollectingSink()
            summary = s.generate(max_tokens=8, sink=sink, **options)
            assert summary.finish_reason == FinishReason.ERROR
            assert summary.tokens == []
            assert summary.error.startswith("the model's logits at step 0 (position ")
            assert "512 NaN and 0 infinite of 512 values" in summary.error
            assert sink.reason == FinishReason.ERROR and sink.error == summary.error
    finally:
        m.close()


def test_non_finite_logits_later_in_greedy_decoding(tmp_path, monkeypatch):
    """Greedy decoding reads back one integer; the periodic look at the logits finds a model
    that turns to NaN later on."""
    from cera.generation import decode_step

    m = cera.load(SEED, device="cpu", threads=1)
    try:
        s = m.new_session(n_ctx=128)
        s.append_text("Hello")
        real = s.runner.forward
        calls = []

        def forward(state, steps, outputs, **kw):
            out = real(state, steps, outputs, **kw)
            calls.append(1)
            if len(calls) > 3 and "logits" in out:
                out["logits"] = np.full_like(out["logits"], np.inf)
            return out

        s.runner.forward = forward
        summary = s.generate(max_tokens=100, temperature=0)
        assert summary.finish_reason == FinishReason.ERROR
        step = decode_step.FINITE_CHECK_EVERY
        assert summary.error.startswith(f"the model's logits at step {step} ")
        assert len(summary.tokens) == step
    finally:
        m.close()


def test_cera_run_reports_the_error_and_fails(tmp_path):
    path = variant(tmp_path, nan_tensor="output_norm.weight")
    env = {k: v for k, v in os.environ.items() if k != "CERA_PLUGINS"}
    proc = subprocess.run(
        [sys.executable, "-c", "from cera_cli.main import main; main()", "run", "-m", str(path), "-n", "4",
         "--temp", "0", "--raw", "Hello"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "error: the model's logits at step 0" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_fifo_is_refused_instead_of_blocking(tmp_path):
    """Reproduction: `cera inspect` on a FIFO blocked forever."""
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    env = {k: v for k, v in os.environ.items() if k != "CERA_PLUGINS"}
    proc = subprocess.run(
        [sys.executable, "-c", "from cera_cli.main import main; main()", "inspect", "-m", str(fifo)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "is not a regular file" in proc.stderr and "Traceback" not in proc.stderr


def test_a_tensor_of_no_dimensions_is_one_element(tmp_path):
    """Found by the fuzzer: a tensor with no dimensions reached a backend as shape ()."""
    doc = parse(SEED)
    next(t for t in doc.tensors if t.name == "blk.0.attn_norm.weight").dims = []
    path = tmp_path / "v.gguf"
    path.write_bytes(serialize(doc)[0])
    from cera.formats.gguf import GGUFFile

    with GGUFFile(path) as g:
        assert g.tensors["blk.0.attn_norm.weight"].shape == (1,)
    assert isinstance(load_error(path), ModelConfigError)


def test_files_the_fuzzer_found():
    """Inputs that once failed, kept as files (regressions/, for findings that no short
    test above can state): each must now load and run, or give a CeraError."""
    for path in sorted(REGRESSIONS.glob("*.gguf")):
        try:
            m = cera.load(path, device="cpu", threads=1)
        except CeraError:
            continue
        try:
            s = m.new_session(n_ctx=64)
            s.append_text("Hello")
            s.generate(max_tokens=2, temperature=0)
        except CeraError:
            pass
        finally:
            m.close()


def _cera_run(path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CERA_PLUGINS"}
    # the peak is VmHWM, this process image's own: ru_maxrss keeps, across exec, the peak of
    # the process that forked it (a pytest worker holding models reads as gigabytes)
    code = (
        "import re, sys\n"
        "from cera_cli.main import main\n"
        "try:\n    main()\n"
        "finally:\n"
        "    hwm = re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1)\n"
        "    print('peak-kb', hwm, file=sys.stderr)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, "run", "-m", str(path), "-n", "2", "--raw", *args, "Hello"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize(
    "args, message",
    [
        (["--temp", "nan"], "temperature must be a finite number, got nan"),
        (["--top-p", "nan"], "top_p must be a finite number, got nan"),
        (["--min-p", "nan"], "min_p must be a finite number, got nan"),
        (["-c", "1000000000"], "tokens needs 361.4 GiB of memory"),
        (["-c", "2147483648"], "tokens needs 776.0 GiB of memory"),
    ],
)
def test_cera_run_options_that_ended_in_tracebacks(args, message):
    """Reproductions: `--temp nan`, `--top-p nan`, `--min-p nan` and `-c 1000000000` ended in
    tracebacks; then `-c 1000000000` wrote a 4 GB position table before failing and
    `-c 2147483648` ran for minutes filling 8 GB. The state's size (3 layers x 2 KV heads x
    (16 + 16) values x 2 bytes + a 4-byte position, per token) is refused before anything
    is allocated."""
    proc = _cera_run(SEED, *args)
    assert proc.returncode == 1, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    peak_kb = int(re.search(r"peak-kb (\d+)", proc.stderr).group(1))
    assert peak_kb < 1024 * 1024, f"{peak_kb} KB"


def test_a_context_past_32_bit_positions_is_refused(monkeypatch):
    """A state small per token (one short convolution: only the position table grows) but
    a context past what 32-bit positions hold is refused by name, not wrapped."""
    from cera import state as state_module
    from cera.errors import SessionError

    spec = state_module.StateSpec()
    spec.add(state_module.ShortConv(channels=4, kernel=3))
    monkeypatch.setattr(state_module, "memory_ceiling", lambda: 1 << 60)
    with pytest.raises(
        SessionError, match=r"n_ctx must be at most 2147483647 \(positions are 32-bit\), got 2147483648"
    ):
        state_module.HostState(spec, n_ctx=1 << 31)
    monkeypatch.setattr(state_module, "memory_ceiling", lambda: 1 << 30)
    with pytest.raises(CeraError, match=r"needs 4\.0 GiB of memory, more than this machine has \(1\.0 GiB"):
        state_module.HostState(spec, n_ctx=(1 << 30) - 1)


def test_the_mutator_handles_a_vocabulary_an_earlier_mutation_emptied():
    """The harness's own bug, found by the slow run (open mode): one case cut the vocabulary
    to nothing, the next mutation of the same case picked a token of it to damage, and the
    whole test died in random.randrange instead of trying the file."""
    import random

    from gguf_mutate import m_tokenizer

    doc = parse(SEED)
    tokens = doc.kv("tokenizer.ggml.tokens")
    vtype, (etype, _) = tokens.vtype, tokens.value
    picked_a_token = 0
    for n in range(200):
        kv = doc.kv("tokenizer.ggml.tokens")
        kv.vtype, kv.value = vtype, (etype, [])  # emptied (and, after a retype, restored)
        rng = random.Random(n)
        if random.Random(n).randrange(10) == 2:
            picked_a_token += 1
        what = m_tokenizer(rng, doc)
        if "retyped" not in str(what):
            assert doc.kv("tokenizer.ggml.tokens").value[1] == []
    assert picked_a_token > 0  # the path that failed was taken


# -- metadata of the wrong type (tables retyped to scalars or other element types) -------------

RETYPED = {
    "tokens as a string": ("tokenizer.ggml.tokens", GGUFValueType.STRING, "<unk>"),
    "tokens as an integer": ("tokenizer.ggml.tokens", GGUFValueType.UINT32, 7),
    "tokens as integers": ("tokenizer.ggml.tokens", GGUFValueType.ARRAY, (GGUFValueType.INT32, np.arange(512, dtype=np.int32))),
    "scores as a string": ("tokenizer.ggml.scores", GGUFValueType.STRING, "x"),
    "token types as a float": ("tokenizer.ggml.token_type", GGUFValueType.FLOAT32, 0.5),
}


def retyped(tmp_path: Path, key: str, vtype, value) -> Path:
    doc = parse(SEED)
    entry = doc.kv(key)
    if entry is None:
        doc.kvs.append(KV(key, vtype, value))
    else:
        entry.vtype, entry.value = vtype, value
    path = tmp_path / "retyped.gguf"
    path.write_bytes(serialize(doc)[0])
    return path


@pytest.mark.parametrize("case", list(RETYPED))
def test_a_retyped_tokenizer_table_is_a_clear_error(tmp_path, case):
    """`cera.load`, `cera run` and `cera inspect` on a file whose tokenizer table has another
    type: a CeraError naming the key (it escaped as a TypeError)."""
    key, vtype, value = RETYPED[case]
    path = retyped(tmp_path, key, vtype, value)
    e = load_error(path)
    assert key in str(e), str(e)
    from cera.plugins.manager import get_manager
    from cera_cli.commands.inspect import inspect_report

    try:
        inspect_report(path, get_manager())
    except CeraError as e:
        assert key in str(e)
    run = subprocess.run([sys.executable, "-m", "cera_cli.main", "run", "-m", str(path), "-p", "Hi", "-n", "2", "--device", "cpu"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode != 0 and "Traceback" not in run.stderr and key in run.stderr, run.stderr[-2000:]
