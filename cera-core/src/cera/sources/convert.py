"""Converting SafeTensors models (a Hugging Face repository or folder) to GGUF, streaming.

The output is what llama.cpp's ``convert_hf_to_gguf.py --outtype f32`` followed by
``llama-quantize`` makes (tested against both on tiny llama, qwen2, qwen3, smollm3,
granite, olmo2, phi2 and starcoder2 models): the same metadata keys and values, the same tensors with the same shapes, types
and order, and the same bytes for every type cera writes (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
Q5_0, Q5_1, Q6_K and the Q5_K/Q4_K/Q3_K/Q2_K mixtures; `cera.sources.quants`).

Streaming: each tensor is read from its shard on its own (a positioned read of exactly its
bytes, never the whole shard), turned to float32 and quantized a block of rows at a time,
and appended to the output, whose header (every tensor's name, shape and type) is known
before any data is read. Peak memory is therefore the largest tensor in its source dtype
plus ``MEMORY_BOUND_BYTES`` (32 MiB: a chunk of float32 rows, its quantized form and the
quantizers' temporaries; measured in tests/hub/test_hub_convert.py). The file is written under a temporary name and renamed when
complete, so an interrupted conversion leaves nothing in the cache.

Architectures: llama (and Mistral-style llama checkpoints), qwen2, qwen3, smollm3, granite, olmo2,
phi2, starcoder2; byte-level
BPE tokenizers (tokenizer.json). Others are refused with the list; convert them with
llama.cpp's converter.
"""

from __future__ import annotations

import errno
import json
import os
import re
import struct
import sys
from pathlib import Path

import attrs
import numpy as np

from ..errors import CeraError, ModelNotFound
from . import bundles, hub

CONVERTER_VERSION = 1  # part of the cache key: a converter change gives new files
ROW_CHUNK_BYTES = 1 << 20  # float32 rows quantized at a time
# What a conversion holds besides the tensor being converted: the float32 rows of one chunk,
# their quantized form and the quantizers' temporaries (measured: tests/hub/test_hub_convert.py;
# the peak's rise over the post-import peak, as VmHWM, on a model whose largest tensor is 32 MiB, 1 MiB chunks:
# Q8_0 37.5 MiB, Q3_K_M 44.1, Q4_K_M 46.0, Q2_K 47.6, against largest + bound = 64 MiB; with 2 MiB chunks they
# were 41.8, 54.6, 59.5 and 61.0, too near the bound).
MEMORY_BOUND_BYTES = 32 << 20
QUANT_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q6_K", "Q5_K_M", "Q5_K_S", "Q4_K_M", "Q4_K_S",
               "Q3_K_L", "Q3_K_M", "Q3_K_S", "Q2_K")


class ConversionError(CeraError):
    """A SafeTensors model cannot be converted (unknown architecture, damaged file, ...)."""


def is_convertible(files) -> bool:
    """Whether a repository listing holds a transformers model in SafeTensors."""
    names = set(files)
    return "config.json" in names and any(n.endswith(".safetensors") for n in names)


# -- SafeTensors ------------------------------------------------------------------------

_ST_DTYPES = {"F32": (np.float32, 4), "F16": (np.float16, 2), "BF16": (np.uint16, 2)}


@attrs.frozen
class SourceTensor:
    name: str
    path: Path
    dtype: str
    shape: tuple
    offset: int  # absolute, in the file
    nbytes: int

    def read(self) -> np.ndarray:
        """The tensor's values in its stored dtype (BF16 as uint16 bits), read on their own."""
        np_dtype, size = _ST_DTYPES[self.dtype]
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            buf = np.empty(self.nbytes // size, dtype=np_dtype)
            if f.readinto(memoryview(buf).cast("B")) != self.nbytes:
                raise ConversionError(f"{self.path.name}: tensor {self.name!r} runs past the end of the file (truncated?)")
        return buf.reshape(self.shape)


def read_safetensors_index(path: Path) -> dict[str, SourceTensor]:
    """The tensor index of one SafeTensors file (its JSON header), checked against its size."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ConversionError(f"{path}: not a SafeTensors file (shorter than its header length)")
        (n,) = struct.unpack("<Q", head)
        if n > min(size - 8, 100 << 20):
            raise ConversionError(f"{path}: SafeTensors header length {n} does not fit the file")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise ConversionError(f"{path}: SafeTensors header is not JSON ({e})") from None
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = info.get("dtype")
        if dtype not in _ST_DTYPES:
            raise ConversionError(f"{path.name}: tensor {name!r} has dtype {dtype}; cera converts F32, F16 and BF16")
        start, end = info["data_offsets"]
        shape = tuple(int(d) for d in info["shape"])
        if end - start != int(np.prod(shape, dtype=np.int64)) * _ST_DTYPES[dtype][1] or 8 + n + end > size:
            raise ConversionError(f"{path.name}: tensor {name!r} has offsets that do not fit its shape or the file")
        out[name] = SourceTensor(name, path, dtype, shape, 8 + n + start, end - start)
    return out


def to_f32(a: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


# -- what llama.cpp's converter writes ---------------------------------------------------

ARCHS = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
         "Qwen3ForCausalLM": "qwen3", "SmolLM3ForCausalLM": "smollm3", "GraniteForCausalLM": "granite",
         "Olmo2ForCausalLM": "olmo2", "PhiForCausalLM": "phi2", "Starcoder2ForCausalLM": "starcoder2"}  # fmt: skip
# llama.cpp converts these with its LlamaModel (rotary rows permuted, vocab size and rope
# dimension written); smollm3's NoPE layers are implied by the architecture, not stored;
# granite adds its four multipliers and ignores head_dim.
_LLAMA_LIKE = ("llama", "smollm3", "granite")
_GRANITE_SCALES = (("attention_multiplier", "attention.scale"), ("embedding_multiplier", "embedding_scale"),
                   ("residual_multiplier", "residual_scale"), ("logits_scaling", "logit_scale"))  # fmt: skip


def _arch(config: dict, where: str) -> str:
    names = config.get("architectures") or []
    for n in names:
        if n in ARCHS:
            return ARCHS[n]
    raise ConversionError(
        f"{where}: cera converts {', '.join(sorted(ARCHS))} checkpoints, not {', '.join(names) or 'an unnamed one'}; "
        f"convert it with llama.cpp's convert_hf_to_gguf.py, or use a GGUF repository"
    )


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's reordering of Q/K rows for its rotary layout (HF's rotate-half -> pairs)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@attrs.define
class Plan:
    arch: str
    metadata: list  # (key, value, GGUFValueType or None)
    tensors: list  # (gguf name, SourceTensor, gguf shape (ne order), GGML type, transform)


def _tokenizer_metadata(folder: Path, config: dict) -> list:
    from gguf import GGUFValueType as V

    tj = folder / "tokenizer.json"
    if not tj.exists():
        raise ConversionError(f"{folder}: no tokenizer.json (cera converts byte-level BPE tokenizers from it)")
    tok = json.loads(tj.read_text(encoding="utf-8"))
    model = tok.get("model", {})
    if model.get("type") != "BPE":
        raise ConversionError(f"{tj}: tokenizer model {model.get('type')!r}; cera converts byte-level BPE tokenizers")
    tcfg = _json_or_empty(folder / "tokenizer_config.json")
    vocab = dict(model["vocab"])
    added = {a["content"]: a for a in tok.get("added_tokens", [])}
    for a in added.values():
        vocab[a["content"]] = a["id"]
    n_vocab = config.get("vocab_size", len(vocab))
    tokens, types = [f"[PAD{i}]" for i in range(n_vocab)], [5] * n_vocab  # 5: unused
    for text, i in vocab.items():
        if i < n_vocab:
            tokens[i] = text
            a = added.get(text)
            types[i] = 1 if a is None else (3 if a.get("special") or _looks_special(text) else 4)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    out = [("tokenizer.ggml.model", "gpt2", None), ("tokenizer.ggml.pre", _pre_name(tok, tj), None),
           ("tokenizer.ggml.tokens", tokens, None), ("tokenizer.ggml.token_type", types, V.INT32),
           ("tokenizer.ggml.merges", merges, None)]  # fmt: skip
    special = {**_json_or_empty(folder / "special_tokens_map.json"), **tcfg}
    for role in ("bos", "eos", "unk", "sep", "pad"):
        t = special.get(f"{role}_token")
        if isinstance(t, dict):
            t = t.get("content")
        tid = vocab.get(t) if isinstance(t, str) else None
        if tid is None and role in ("bos", "eos") and isinstance(config.get(f"{role}_token_id"), int):
            tid = config[f"{role}_token_id"]
        if tid is not None:
            out.append((f"tokenizer.ggml.{role}_token_id", int(tid), V.UINT32))
    for flag in ("bos", "sep", "eos"):
        v = tcfg.get(f"add_{flag}_token")
        if isinstance(v, bool):
            out.append((f"tokenizer.ggml.add_{flag}_token", v, V.BOOL))
        elif flag == "sep":
            out.append(("tokenizer.ggml.add_sep_token", False, V.BOOL))
    template = tcfg.get("chat_template")
    if (folder / "chat_template.jinja").exists():
        template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    if isinstance(template, str) and template:
        out.append(("tokenizer.chat_template", template, None))
    return out


def _looks_special(text: str) -> bool:
    return (text.startswith("<|") and text.endswith("|>")) or (text.startswith("<") and text.endswith(">") and " " not in text)


def _json_or_empty(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except ValueError as e:
        raise ConversionError(f"{path}: not valid JSON ({e})") from None


# Pre-tokenizer regexes of tokenizer.json -> the name llama.cpp writes (it finds the name by
# hashing a tokenization; here the pattern itself says which splitter the vocabulary needs).
_PRE_BY_PATTERN = {
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "llama-bpe",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "qwen2",
}


def _pre_name(tok: dict, where: Path) -> str:
    pre = tok.get("pre_tokenizer") or {}
    items = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    patterns = [p.get("pattern", {}).get("Regex") for p in items if p.get("type") == "Split"]
    byte_level = [p for p in items if p.get("type") == "ByteLevel"]
    digits = [p for p in items if p.get("type") == "Digits"]
    if len(patterns) == 1 and patterns[0] in _PRE_BY_PATTERN and not digits:
        return _PRE_BY_PATTERN[patterns[0]]
    if not patterns and byte_level and byte_level[0].get("use_regex", True):
        return "smollm" if digits and digits[0].get("individual_digits") else "gpt-2"
    raise ConversionError(f"{where}: its pre-tokenizer is not one cera knows how to name for llama.cpp; "
                          f"convert with llama.cpp's convert_hf_to_gguf.py")  # fmt: skip


def plan(folder: Path, qtype: str, name: str | None = None) -> Plan:
    """What the output holds: metadata and, per tensor, its source, shape and type."""
    import gguf
    from gguf import GGUFValueType as V

    folder = Path(folder)
    config = _json_or_empty(folder / "config.json")
    if not config:
        raise ConversionError(f"{folder}: no config.json")
    arch = _arch(config, str(folder))
    if qtype not in QUANT_TYPES:
        raise ConversionError(f"cannot convert to {qtype!r}; cera converts to {', '.join(QUANT_TYPES)}")
    sources: dict[str, SourceTensor] = {}
    for p in sorted(folder.glob("*.safetensors")):
        index = read_safetensors_index(p)
        sources.update((n, index[n]) for n in sorted(index))
    if not sources:
        raise ConversionError(f"{folder}: no .safetensors files")
    n_layer = int(config["num_hidden_layers"])
    n_head = int(config["num_attention_heads"])
    n_kv = int(config.get("num_key_value_heads", n_head))
    n_embd = int(config["hidden_size"])
    if arch == "granite":  # llama.cpp's converter drops it: granite's heads are hidden / heads wide
        config = {k: v for k, v in config.items() if k != "head_dim"}
    head_dim = int(config.get("head_dim") or n_embd // n_head)
    arch_enum = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2, "qwen3": gguf.MODEL_ARCH.QWEN3,
                 "smollm3": gguf.MODEL_ARCH.SMOLLM3, "granite": gguf.MODEL_ARCH.GRANITE, "olmo2": gguf.MODEL_ARCH.OLMO2,
                 "phi2": gguf.MODEL_ARCH.PHI2, "starcoder2": gguf.MODEL_ARCH.STARCODER2}[arch]  # fmt: skip
    names = gguf.get_tensor_name_map(arch_enum, n_layer)
    tensors = []
    for hf_name in sources:  # llama.cpp's converter: each shard in order, names sorted within
        st = sources[hf_name]
        if hf_name.endswith("rotary_emb.inv_freq"):
            continue
        gname = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gname is None:
            raise ConversionError(f"{st.path.name}: tensor {hf_name!r} has no GGUF name for {arch}; it cannot be converted")
        transform = None
        if arch in _LLAMA_LIKE and hf_name.endswith(("q_proj.weight", "q_proj.bias")):
            transform = ("permute", n_head)
        elif arch in _LLAMA_LIKE and hf_name.endswith(("k_proj.weight", "k_proj.bias")):
            transform = ("permute", n_kv)
        tensors.append([gname, st, tuple(reversed(st.shape)), None, transform])
    if "output.weight" not in {t[0] for t in tensors}:
        tied = True
    else:
        tied = False
    _choose_types(tensors, qtype, n_layer, tied, n_head // max(n_kv, 1))
    n_params = sum(int(np.prod(t[1].shape)) for t in tensors)
    meta = [("general.architecture", arch, None), ("general.type", "model", None),
            ("general.name", name or folder.name, None),
            ("general.size_label", gguf.size_label(n_params, 0, 0, 0), None),
            (f"{arch}.block_count", n_layer, V.UINT32),
            (f"{arch}.context_length", int(config.get("max_position_embeddings", 0)), V.UINT32),
            (f"{arch}.embedding_length", n_embd, V.UINT32),
            (f"{arch}.feed_forward_length", int(config["intermediate_size"]), V.UINT32),
            (f"{arch}.attention.head_count", n_head, V.UINT32),
            (f"{arch}.attention.head_count_kv", n_kv, V.UINT32),
            (f"{arch}.rope.freq_base", float(config.get("rope_theta", 10000.0)), V.FLOAT32),
            (f"{arch}.attention.layer_norm_rms_epsilon", float(config.get("rms_norm_eps", 1e-6)), V.FLOAT32)]  # fmt: skip
    if arch == "starcoder2":  # LayerNorm, not RMS norm: the plain epsilon key, from norm_epsilon
        meta[-1] = (f"{arch}.attention.layer_norm_epsilon", float(config.get("norm_epsilon", 1e-5)), V.FLOAT32)
    if arch == "phi2":  # llama.cpp's Phi2Model writes its own set: LayerNorm, 4x MLP, partial rotary, no base
        meta = meta[:4] + [
            (f"{arch}.context_length", int(config.get("max_position_embeddings", 0)), V.UINT32),
            (f"{arch}.embedding_length", n_embd, V.UINT32),
            (f"{arch}.feed_forward_length", 4 * n_embd, V.UINT32),
            (f"{arch}.block_count", n_layer, V.UINT32),
            (f"{arch}.attention.head_count", n_head, V.UINT32),
            (f"{arch}.attention.head_count_kv", n_head, V.UINT32),
            (f"{arch}.attention.layer_norm_epsilon", float(config.get("layer_norm_eps", 1e-5)), V.FLOAT32),
            (f"{arch}.rope.dimension_count", int(float(config.get("partial_rotary_factor", 0.5)) * n_embd) // n_head,
             V.UINT32),
        ]  # fmt: skip
    elif arch == "llama" or config.get("head_dim"):  # llama.cpp's converter: llama always, others when given
        meta += [(f"{arch}.attention.key_length", head_dim, V.UINT32),
                 (f"{arch}.attention.value_length", head_dim, V.UINT32)]  # fmt: skip
    if arch in _LLAMA_LIKE:
        meta += [(f"{arch}.vocab_size", int(config["vocab_size"]), V.UINT32),
                 (f"{arch}.rope.dimension_count", head_dim, V.UINT32)]  # fmt: skip
    if arch == "granite":  # written when given and not 0, as llama.cpp's converter does
        meta += [(f"{arch}.{key}", float(config[hf]), V.FLOAT32) for hf, key in _GRANITE_SCALES if config.get(hf)]
    if config.get("rope_scaling"):
        raise ConversionError(f"{folder}: rope_scaling {config['rope_scaling']!r} is not converted by cera yet")
    meta += _tokenizer_metadata(folder, config)
    meta += [("general.quantization_version", 2, V.UINT32), ("general.file_type", _FILE_TYPES[qtype], V.UINT32)]
    if qtype not in ("F32", "F16", "BF16"):
        # llama-quantize lists its tensors by layer: the others first, then block by block, names sorted
        def key(t):
            m = re.match(r"blk\.(\d+)\.", t[0])
            return (int(m[1]) if m else -1, t[0])

        tensors.sort(key=key)
    return Plan(arch, meta, [tuple(t) for t in tensors])


_FILE_TYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10, "Q3_K_S": 11,
               "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18,
               "BF16": 32}  # fmt: skip


def _choose_types(tensors: list, qtype: str, n_layer: int, tied: bool, n_gqa: int = 1) -> None:
    """Each tensor's type, by llama.cpp's rules for the file type (llama-quantize's mixture,
    for a dense model that is not Falcon): 1-D tensors stay F32; the output (or tied
    embeddings) Q6_K; attn_v, ffn_down and attn_output get more bits in some or all layers
    of the K mixtures; rows that do not fit a type's block fall back. ``n_gqa`` is query
    heads per key/value head (Q2_K gives attn_v Q4_K from 4 on)."""
    from gguf import GGMLQuantizationType as T
    from gguf.constants import GGML_QUANT_SIZES

    base = {"F32": T.F32, "F16": T.F16, "BF16": T.BF16, "Q8_0": T.Q8_0, "Q4_0": T.Q4_0, "Q4_1": T.Q4_1,
            "Q5_0": T.Q5_0, "Q5_1": T.Q5_1, "Q6_K": T.Q6_K, "Q5_K_M": T.Q5_K, "Q5_K_S": T.Q5_K, "Q4_K_M": T.Q4_K,
            "Q4_K_S": T.Q4_K, "Q3_K_L": T.Q3_K, "Q3_K_M": T.Q3_K, "Q3_K_S": T.Q3_K, "Q2_K": T.Q2_K}[qtype]  # fmt: skip

    def more_bits(i, n):
        return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2

    i_v = i_down = 0
    fallback = {T.Q2_K: T.Q4_0, T.Q3_K: T.Q4_0, T.Q4_K: T.Q5_0, T.Q5_K: T.Q5_1, T.Q6_K: T.Q8_0}
    for t in tensors:
        name, shape = t[0], t[2]
        if len(shape) < 2 or not name.endswith(".weight"):
            t[3] = T.F32
            continue
        if base in (T.F32, T.F16, T.BF16):
            t[3] = base
            continue
        new = base
        nx = shape[0]
        if name == "output.weight" or (tied and name == "token_embd.weight"):
            if nx % GGML_QUANT_SIZES[base][0] != 0:
                new = T.Q8_0
            elif base != T.Q8_0:
                new = T.Q6_K
        elif name.endswith("attn_v.weight"):
            if qtype == "Q2_K":
                new = T.Q4_K if n_gqa >= 4 else T.Q3_K
            elif qtype == "Q3_K_M":
                new = T.Q5_K if i_v < 2 else T.Q4_K
            elif qtype == "Q3_K_L":
                new = T.Q5_K
            elif qtype in ("Q4_K_M", "Q5_K_M") and more_bits(i_v, n_layer):
                new = T.Q6_K
            elif qtype == "Q4_K_S" and i_v < 4:
                new = T.Q5_K
            i_v += 1
        elif name.endswith("ffn_down.weight"):
            i_layer = int(name.split(".")[1])
            if qtype == "Q2_K":
                new = T.Q3_K
            elif qtype == "Q3_K_M":
                new = T.Q5_K if i_layer < n_layer // 16 else T.Q4_K
            elif qtype == "Q3_K_L":
                new = T.Q5_K
            elif qtype == "Q4_K_M" and more_bits(i_layer, n_layer):
                new = T.Q6_K
            elif qtype == "Q5_K_M" and more_bits(i_layer, n_layer):
                new = T.Q6_K
            elif qtype == "Q4_K_S" and i_layer < n_layer // 8:
                new = T.Q5_K
            i_down += 1
        elif name.endswith("attn_output.weight"):
            new = {"Q2_K": T.Q3_K, "Q3_K_M": T.Q4_K, "Q3_K_L": T.Q5_K}.get(qtype, new)
        if nx % GGML_QUANT_SIZES[new][0] != 0:
            new = fallback.get(new, new)
            if nx % GGML_QUANT_SIZES[new][0] != 0:
                new = T.F16
        t[3] = new


def convert_folder(folder: Path, out: Path, qtype: str, strategy: str = "search", name: str | None = None,
                   quiet: bool = True) -> Path:  # fmt: skip
    """Convert a local transformers SafeTensors folder to a GGUF file at ``out``."""
    import gguf

    from .quants import quantize

    p = plan(folder, qtype, name=name)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.partial")
    writer = gguf.GGUFWriter(str(tmp), p.arch)
    writer.kv_data[0].clear()  # the writer pre-adds the architecture; ours go in llama.cpp's order
    for key, value, vtype in p.metadata:
        if vtype is None:
            if isinstance(value, str):
                writer.add_string(key, value)
            else:
                writer.add_array(key, value)
        elif isinstance(value, list):
            writer.add_key_value(key, value, gguf.GGUFValueType.ARRAY, sub_type=vtype)
        else:
            writer.add_key_value(key, value, vtype)
    from gguf.constants import GGML_QUANT_SIZES

    for gname, _st, shape, gtype, _ in p.tensors:
        bs, ts = GGML_QUANT_SIZES[gtype]
        n = int(np.prod(shape))
        writer.add_tensor_info(gname, tuple(reversed(shape)), np.dtype(np.float32), n // bs * ts, raw_dtype=gtype)
    _check_space(out, sum(int(np.prod(t[2])) // GGML_QUANT_SIZES[t[3]][0] * GGML_QUANT_SIZES[t[3]][1] for t in p.tensors),
                 writer)  # fmt: skip
    bar = None
    if not quiet:
        try:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(p.tensors), unit="tensor", desc=f"converting to {qtype}", file=sys.stderr)
        except ImportError:
            pass
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        fout = writer.fout[0]
        writer.write_padding(fout, fout.tell())
        for _gname, st, shape, gtype, transform in p.tensors:
            data = st.read()
            if transform is not None:
                data = _permute(data, transform[1])
            rows = data.reshape(-1, shape[0])
            step = max(1, ROW_CHUNK_BYTES // (4 * shape[0]))
            written = 0
            for r0 in range(0, rows.shape[0], step):
                chunk = to_f32(rows[r0:r0 + step], st.dtype)
                q = quantize(chunk, gtype, strategy)
                fout.write(q.tobytes())
                written += q.nbytes
            del data, rows
            writer.write_padding(fout, written)
            if bar is not None:
                bar.update(1)
        fout.flush()
        os.fsync(fout.fileno())
        writer.close()
        os.replace(tmp, out)
    except BaseException as e:
        _abandon(writer, tmp, out, e)
        raise
    finally:
        if bar is not None:
            bar.close()
    return out


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _check_space(out: Path, need: int, writer) -> None:
    """Say before writing, not after an hour, that the output will not fit."""
    import shutil

    free = shutil.disk_usage(out.parent).free
    if need > free:
        writer.close()
        Path(writer.path).unlink(missing_ok=True)
        raise ConversionError(
            f"writing {out} needs about {need / 2**20:.1f} MiB, but {out.parent} has only {free / 2**20:.1f} MiB free; "
            f"free some space or write it elsewhere (conversions of Hub repositories go under CERA_CACHE_DIR)"
        )


def _abandon(writer, tmp: Path, out: Path, e: BaseException) -> None:
    """Close and delete a partial output (closing can fail again on a full disk), and turn
    a full disk into an error that says so."""
    try:
        writer.close()
    except OSError:
        pass
    tmp.unlink(missing_ok=True)
    if isinstance(e, OSError) and e.errno in _DISK_FULL:
        raise ConversionError(
            f"the disk filled up while writing {out} ({e.strerror}); the partial file was deleted. Free some space "
            f"or write it elsewhere (conversions of Hub repositories go under CERA_CACHE_DIR)"
        ) from None


def converted_path(state, quant: str, strategy: str = "search") -> Path | None:
    """Where the conversion of a repository at a commit with these options is cached
    (keyed by repository, commit, type, strategy and converter version), or None for a
    type cera does not convert to."""
    qtype = quant.upper()
    if qtype not in QUANT_TYPES:
        return None
    return (bundles.cache_dir() / "converted" / state.repo.replace("/", "--") / state.commit
            / f"{state.repo.split('/')[-1]}-{qtype}-{strategy}-v{CONVERTER_VERSION}.gguf")  # fmt: skip


def from_hub(client, state, quant: str | None, strategy: str = "search") -> Path:
    """Convert a Hub repository without GGUF files (fetching its SafeTensors into the
    Hugging Face cache first) to a GGUF cached by repository, commit and options."""
    if not quant:
        raise ModelNotFound(
            f"Hugging Face repo {state.repo} has no GGUF file but a SafeTensors model: cera converts it to GGUF "
            f"when you pick a type: {state.repo}:Q8_0 (or --quant; types: {', '.join(QUANT_TYPES)})"
        )
    qtype = quant.upper()
    if qtype not in QUANT_TYPES:
        raise ModelNotFound(f"cannot convert {state.repo} to {quant}: cera converts to {', '.join(QUANT_TYPES)}")
    out = converted_path(state, qtype, strategy)
    if out.exists():
        return out
    wanted = [f for f in state.files if f.endswith((".safetensors", ".json", ".jinja")) and "/" not in f]
    paths = client.fetch(state, sorted(wanted))
    folder = paths[0].parent
    client.log(f"converting {state.repo}@{state.commit[:12]} to {qtype} (streaming, tensor by tensor) into {out.parent}")
    return convert_folder(folder, out, qtype, strategy, name=state.repo.split("/")[-1], quiet=client.quiet)


def _layer0(v) -> int:
    """A head count that may be per layer (an array): layer 0's, as llama.cpp's n_gqa() reads."""
    return int(v[0]) if hasattr(v, "__len__") else int(v)


def quantize_gguf(src: Path, out: Path, qtype: str, strategy: str = "search", quiet: bool = True) -> Path:
    """Quantize an F32/F16/BF16 GGUF file to ``qtype`` as llama-quantize would (its type
    mixture and tensor order), one tensor at a time."""
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf import GGUFValueType as V
    from gguf.constants import GGML_QUANT_SIZES

    from ..formats.gguf import GGUFFile
    from .quants import quantize

    if qtype not in QUANT_TYPES:
        raise ConversionError(f"cannot quantize to {qtype!r}; cera quantizes to {', '.join(QUANT_TYPES)}")
    out = Path(out)
    with GGUFFile(src) as g:
        arch = g.architecture
        for info in g.tensors.values():
            if info.ggml_type not in (T.F32, T.F16, T.BF16):
                raise ConversionError(
                    f"{src}: tensor {info.name!r} is already {info.type_name}; quantize from an F32, F16 or BF16 file "
                    f"(quantizing a quantized file again loses more than it should)"
                )
        n_layer = int(g.arch_get("block_count", 0))
        tensors = [[name, info, info.shape, None, None] for name, info in g.tensors.items()]
        n_head = _layer0(g.arch_get("attention.head_count", 1))
        n_kv = _layer0(g.arch_get("attention.head_count_kv", n_head))
        _choose_types(tensors, qtype, n_layer, "output.weight" not in g.tensors, n_head // max(n_kv, 1))
        if qtype not in ("F32", "F16", "BF16"):
            tensors.sort(key=lambda t: (int(m[1]) if (m := re.match(r"blk\.(\d+)\.", t[0])) else -1, t[0]))
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.partial")
        writer = gguf.GGUFWriter(str(tmp), arch)
        writer.kv_data[0].clear()
        for key, value in g.metadata.items():
            if key in ("general.file_type", "general.quantization_version") or key.startswith("split."):
                continue
            vtype = g.value_types[key]
            if vtype == V.ARRAY:
                if len(value) and isinstance(value[0], str):
                    writer.add_key_value(key, list(value), V.ARRAY, sub_type=V.STRING)
                else:
                    arr = np.asarray(value)
                    sub = {np.dtype("int32"): V.INT32, np.dtype("uint32"): V.UINT32, np.dtype("float32"): V.FLOAT32,
                           np.dtype("int64"): V.INT64, np.dtype("uint8"): V.UINT8, np.dtype("int8"): V.INT8,
                           np.dtype("bool"): V.BOOL, np.dtype("float64"): V.FLOAT64}.get(arr.dtype, V.INT32)  # fmt: skip
                    writer.add_key_value(key, arr.tolist(), V.ARRAY, sub_type=sub)
            else:
                writer.add_key_value(key, value, vtype)
        writer.add_key_value("general.quantization_version", 2, V.UINT32)
        writer.add_key_value("general.file_type", _FILE_TYPES[qtype], V.UINT32)
        for name, info, shape, gtype, _ in tensors:
            bs, ts = GGML_QUANT_SIZES[gtype]
            writer.add_tensor_info(name, tuple(reversed(shape)), np.dtype(np.float32), info.n_elements // bs * ts,
                                   raw_dtype=gtype)  # fmt: skip
        _check_space(out, sum(t[1].n_elements // GGML_QUANT_SIZES[t[3]][0] * GGML_QUANT_SIZES[t[3]][1] for t in tensors),
                     writer)  # fmt: skip
        try:
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_ti_data_to_file()
            fout = writer.fout[0]
            writer.write_padding(fout, fout.tell())
            for name, info, shape, gtype, _ in tensors:
                data = g.tensor_data(name)
                rows = data.reshape(-1, shape[0]) if shape else data.reshape(1, -1)
                step = max(1, ROW_CHUNK_BYTES // (4 * rows.shape[1]))
                written = 0
                for r0 in range(0, rows.shape[0], step):
                    part = rows[r0:r0 + step]
                    chunk = to_f32(part, "BF16") if info.ggml_type == T.BF16 else part.astype(np.float32)
                    q = quantize(chunk, gtype, strategy)
                    fout.write(q.tobytes())
                    written += q.nbytes
                writer.write_padding(fout, written)
            fout.flush()
            os.fsync(fout.fileno())
            writer.close()
            os.replace(tmp, out)
        except BaseException as e:
            _abandon(writer, tmp, out, e)
            raise
    return out


def quantize_source(src: str, out: Path, qtype: str, strategy: str = "search", quiet: bool = False) -> Path:
    """`cera quantize`: a GGUF file, a local SafeTensors folder, or a Hub repository -> ``out``."""
    qtype = qtype.upper()
    path = Path(src).expanduser()
    if path.is_file():
        return quantize_gguf(path, out, qtype, strategy, quiet=quiet)
    if path.is_dir():
        return convert_folder(path, out, qtype, strategy, name=path.name, quiet=quiet)
    hs = hub.parse_source(src)
    if hs is None:
        raise ModelNotFound(f"{src!r} is not a file, a folder or a Hugging Face repo (org/repo[@REV])")
    h = hub.Hub(quiet=quiet)
    state = h.state(hs.repo, hs.revision)
    if not is_convertible(state.files):
        raise ModelNotFound(f"Hugging Face repo {hs.repo} has no SafeTensors model to convert")
    wanted = [f for f in state.files if f.endswith((".safetensors", ".json", ".jinja")) and "/" not in f]
    folder = h.fetch(state, sorted(wanted))[0].parent
    return convert_folder(folder, out, qtype, strategy, name=hs.repo.split("/")[-1], quiet=quiet)
