"""A hybrid test family: short-convolution layers and attention layers (LFM2's shape),
with random weights, for tests of state that is not a KV cache.

The family is the core decoder with a mixer per layer (`cera.blocks.decoder`): the file says
which layers attend by their KV head count (0: a short convolution), as LFM2 files do.
The vocabulary is GPT-2's 256 byte tokens without merges plus ChatML's special tokens,
so any text round-trips through the tokenizer exactly (a chat re-renders its history and
must get the same tokens back). The output bias keeps everything but printable ASCII from
being chosen (no special token ends a generation early, no invalid UTF-8 is generated).
"""

from __future__ import annotations

from pathlib import Path

import attrs
import numpy as np
from gguf import GGUFWriter

from cera.blocks.decoder import DecoderConfig, DecoderModel, read_decoder_config

ARCH = "cera-hybrid-test"
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_tokens() -> list[str]:
    """GPT-2's byte-to-unicode alphabet: one token per byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs, strict=True))
    return [chr(table[b]) for b in range(256)]


class HybridTestModel(DecoderModel):
    family = "hybrid-test"

    @classmethod
    def read_config(cls, gguf) -> DecoderConfig:
        config, hp = read_decoder_config(gguf, cls.family)
        hp.ignore("shortconv.l_cache")  # the kernel size is the conv tensor's shape
        hp.check_all_understood()
        return attrs.evolve(config, mixers=tuple("attention" if n else "shortconv" for n in config.kv_heads))


def write_hybrid(path: Path, n_layer: int = 4, n_embd: int = 64, n_ff: int = 128, n_head: int = 4, n_kv: int = 2,
                 kernel: int = 3, seed: int = 0) -> Path:  # fmt: skip
    rng = np.random.default_rng(seed)
    tokens = byte_tokens() + list(SPECIALS)
    merged = tokens[0] + tokens[1]  # one merge of two control bytes, never generated (a BPE file needs one)
    tokens.append(merged)
    n_vocab = len(tokens)
    hd = n_embd // n_head
    w = GGUFWriter(str(path), ARCH)
    w.add_uint32(f"{ARCH}.context_length", 512)
    w.add_uint32(f"{ARCH}.embedding_length", n_embd)
    w.add_uint32(f"{ARCH}.block_count", n_layer)
    w.add_uint32(f"{ARCH}.feed_forward_length", n_ff)
    w.add_uint32(f"{ARCH}.attention.head_count", n_head)
    kv = [0 if i % 2 == 0 else n_kv for i in range(n_layer)]  # conv, attention, conv, attention
    w.add_array(f"{ARCH}.attention.head_count_kv", kv)
    w.add_float32(f"{ARCH}.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_float32(f"{ARCH}.rope.freq_base", 10000.0)
    w.add_uint32(f"{ARCH}.shortconv.l_cache", kernel)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([1] * 256 + [3] * len(SPECIALS) + [1])
    w.add_token_merges([f"{tokens[0]} {tokens[1]}"])
    w.add_bos_token_id(256)
    w.add_eos_token_id(256)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)

    def t(name, *shape, scale=0.2):
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    t("token_embd.weight", n_vocab, n_embd, scale=1.0)
    t("output_norm.weight", n_embd)
    bias = np.full(n_vocab, -1000.0, np.float32)
    bias[32:127] = 0.0  # printable ASCII only
    w.add_tensor("output.bias", bias)
    for i in range(n_layer):
        t(f"blk.{i}.attn_norm.weight", n_embd)
        if kv[i]:
            t(f"blk.{i}.attn_q.weight", n_embd, n_embd)
            t(f"blk.{i}.attn_k.weight", n_kv * hd, n_embd)
            t(f"blk.{i}.attn_v.weight", n_kv * hd, n_embd)
            t(f"blk.{i}.attn_output.weight", n_embd, n_embd)
        else:
            t(f"blk.{i}.shortconv.in_proj.weight", 3 * n_embd, n_embd)
            t(f"blk.{i}.shortconv.conv.weight", n_embd, kernel, scale=0.5)
            t(f"blk.{i}.shortconv.out_proj.weight", n_embd, n_embd)
        t(f"blk.{i}.ffn_norm.weight", n_embd)
        t(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        t(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        t(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def register(manager) -> None:
    """Register the family with a plugin manager (as a plugin module would)."""
    import types

    import cera

    module = types.ModuleType("hybrid_test_plugin")
    module.CERA_PLUGIN_API = f">={cera.PLUGIN_API_VERSION},<{cera.PLUGIN_API_VERSION + 1}"

    @cera.hookimpl
    def cera_register_models(register):
        register(cera.ModelFamily(name="hybrid-test", architectures=(ARCH,), factory="hybrid_family:HybridTestModel"))

    module.cera_register_models = cera_register_models
    record = manager.register_plugin(module, "hybrid-test")
    assert record.status == "ok", record.error
