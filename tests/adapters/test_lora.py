"""LoRA adapters at run time, on a tiny random llama (F32): the adapted model against the
same model with the adapters merged into its weights in numpy (the independent reference),
scale 0 against the base, several adapters, switching, batching, the PEFT form, refusals."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import cera
from cera.errors import AdapterError

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from lora_files import random_pairs, write_gguf_adapter, write_merged, write_peft_dir  # noqa: E402
from tiny_llama import write_llama  # noqa: E402

TOKENS = [0, 3, 5, 7, 2, 9, 11, 4]
RANK, ALPHA = 4, 8.0


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("lora")
    base = write_llama(d / "base.gguf")
    p1 = random_pairs(base, rank=RANK, seed=1, std=0.3)
    p2 = random_pairs(base, rank=2, seed=2, std=0.3, targets=("attn_v", "ffn_down"), embedding=True)
    return {
        "dir": d,
        "base": base,
        "p1": p1,
        "p2": p2,
        "a1": write_gguf_adapter(d / "a1.gguf", "llama", p1, ALPHA),
        "a2": write_gguf_adapter(d / "a2.gguf", "llama", p2, 0.0),
        "a1_f16": write_gguf_adapter(d / "a1_f16.gguf", "llama", p1, ALPHA, "F16"),
        "peft1": write_peft_dir(d / "peft1", base, p1, ALPHA, RANK),
    }


@pytest.fixture(scope="module")
def model(files):
    with cera.load(files["base"], device="cpu") as m:
        yield m


def logits(loaded, adapters=None, tokens=TOKENS):
    s = loaded.new_session(adapters=adapters)
    s.append_tokens(tokens)
    return s.evaluate().copy()


def merged_logits(files, adapters, name):
    path = write_merged(files["dir"] / f"{name}.gguf", files["base"], adapters)
    with cera.load(path, device="cpu") as m:
        return logits(m)


def test_adapter_equals_merged_weights(files, model):
    a1 = model.load_adapter(files["a1"])
    got = logits(model, [(a1, 0.7)])
    want = merged_logits(files, [(files["p1"], ALPHA, 0.7)], "m1")
    base = logits(model)
    assert np.abs(want - base).max() > 0.02  # the adapter changes the logits
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=0)


def test_two_adapters_and_the_embedding(files, model):
    a1, a2 = model.load_adapter(files["a1"]), model.load_adapter(files["a2"])
    got = logits(model, [(a1, 0.5), (a2, 1.5)])
    want = merged_logits(files, [(files["p1"], ALPHA, 0.5), (files["p2"], 0.0, 1.5)], "m12")
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=0)


def test_scale_zero_is_the_base_model(files, model):
    a1 = model.load_adapter(files["a1"])
    assert np.array_equal(logits(model, [(a1, 0.0)]), logits(model))


def test_f16_adapter_and_same_values_once(files, model):
    a1 = model.load_adapter(files["a1"])
    f16 = model.load_adapter(files["a1_f16"])  # the same values stored F16 (products round activations to F16)
    np.testing.assert_allclose(logits(model, [(f16, 1.0)]), logits(model, [(a1, 1.0)]), atol=1e-4, rtol=0)
    assert model.load_adapter(files["a1"]) is a1  # attached once


def test_peft_directory_equals_gguf_form(files, model):
    a1 = model.load_adapter(files["a1"])
    peft = model.load_adapter(files["peft1"])
    assert peft.pairs.keys() == a1.pairs.keys()
    np.testing.assert_array_equal(logits(model, [(peft, 1.0)]), logits(model, [(a1, 1.0)]))


def test_rslora_scale(files, model, tmp_path):
    plain = model.load_adapter(files["a1"])
    rs = model.load_adapter(write_peft_dir(tmp_path / "rs", files["base"], files["p1"], ALPHA, RANK, rslora=True))
    # PEFT's rsLoRA scales by alpha / sqrt(r): scale sqrt(r) on the plain adapter is the same
    np.testing.assert_allclose(logits(model, [(rs, 1.0)]), logits(model, [(plain, RANK**0.5)]), atol=1e-5, rtol=0)


def test_switching_adapters_on_a_session(files, model):
    a1 = model.load_adapter(files["a1"])
    s = model.new_session()
    s.append_tokens(TOKENS)
    s.evaluate()
    s.set_adapters([(a1, 0.7)])
    np.testing.assert_array_equal(s.evaluate(), logits(model, [(a1, 0.7)]))
    s.set_adapters([])
    np.testing.assert_array_equal(s.evaluate(), logits(model))


def test_generation_in_a_batch_with_different_adapters(files, model):
    a1, a2 = model.load_adapter(files["a1"]), model.load_adapter(files["a2"])
    sets = [[(a1, 1.0)], None, [(a2, 1.0)], [(a1, 0.5), (a2, 0.5)]]

    def alone(adapters):
        s = model.new_session(adapters=adapters)
        s.append_tokens(TOKENS)
        return s.generate(max_tokens=8, temperature=0.0, ignore_eos=True).tokens

    want = [alone(a) for a in sets]
    assert len({tuple(w) for w in want}) > 1
    import threading

    sched = model.scheduler(n_slots=4, n_ctx=64)
    got = [None] * 4

    def run(i):
        s = sched.new_session(adapters=sets[i])
        s.append_tokens(TOKENS)
        got[i] = s.generate(max_tokens=8, temperature=0.0, ignore_eos=True).tokens
        s.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == want


def test_checkpoint_keeps_its_adapters(files, model, tmp_path):
    a1 = model.load_adapter(files["a1"])
    s = model.new_session(adapters=[(a1, 1.0)])
    s.append_tokens(TOKENS)
    s.evaluate()
    s.save(tmp_path / "s.ckpt")
    other = model.new_session()
    with pytest.raises(cera.CeraError, match="LoRA adapters"):
        other.load(tmp_path / "s.ckpt")
    same = model.new_session(adapters=[(a1, 1.0)])
    same.load(tmp_path / "s.ckpt")


def test_prefix_cache_is_keyed_by_adapters(files, tmp_path):
    with cera.load(files["base"], device="cpu") as m:
        a1 = m.load_adapter(files["a1"])
        want_base, want_a1 = logits(m), logits(m, [(a1, 1.0)])
        m.enable_prefix_cache()
        assert np.array_equal(logits(m, [(a1, 1.0)]), want_a1)
        assert np.array_equal(logits(m), want_base)  # not the adapted entry
        assert np.array_equal(logits(m, [(a1, 1.0)]), want_a1)


@pytest.mark.parametrize(
    "change, match",
    [
        ({"arch": "qwen2"}, "architecture 'qwen2'"),
        ({"rename": "blk.7.attn_q.weight"}, "blk.7.attn_q.weight"),
        ({"transpose": True}, "needs lora_a"),
        ({"half": True}, "has no lora_b"),
    ],
)
def test_mismatches_are_refused(files, model, tmp_path, change, match):
    pairs = dict(files["p1"])
    name = "blk.0.attn_k.weight"  # not square: a transposed pair cannot fit
    a, b = pairs[name]
    if "rename" in change:
        pairs[change["rename"]] = pairs.pop(name)
    if change.get("transpose"):
        pairs[name] = (b.T.copy(), a.T.copy())
    path = write_gguf_adapter(tmp_path / "bad.gguf", change.get("arch", "llama"), pairs, ALPHA)
    if change.get("half"):
        from gguf import GGUFWriter

        w = GGUFWriter(str(path), "llama")
        w.add_type("adapter")
        w.add_string("adapter.type", "lora")
        w.add_tensor(name + ".lora_a", a)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    with pytest.raises(AdapterError, match=match):
        model.load_adapter(path)


def test_a_model_file_is_not_an_adapter(files, model):
    with pytest.raises(AdapterError, match="general.type 'adapter'"):
        model.load_adapter(files["base"])
    with pytest.raises(AdapterError, match="no such LoRA adapter"):
        model.load_adapter(files["dir"] / "missing.gguf")


def test_unsupported_peft_options(files, model, tmp_path):
    import json

    folder = write_peft_dir(tmp_path / "dora", files["base"], files["p1"], ALPHA, RANK)
    cfg = json.loads((folder / "adapter_config.json").read_text())
    cfg["use_dora"] = True
    (folder / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(AdapterError, match="DoRA"):
        model.load_adapter(folder)
