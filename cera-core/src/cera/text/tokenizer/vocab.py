"""The vocabulary of a GGUF file, read from its `tokenizer.ggml.*` metadata.

This reproduces what llama.cpp's `llama_vocab::load` derives from the same keys: the
tokenizer kind and its defaults, the special token ids (with the defaults llama.cpp
assumes when a key is missing), the token attributes (including the fix-ups llama.cpp
applies by token text: end-of-turn tokens made control tokens, "unused" tokens, ...),
and the set of end-of-generation ids. Keeping these rules in one place is what makes
`Tokenizer` agree with llama.cpp on files whose metadata is incomplete.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs
import numpy as np

from ...errors import TokenizerError

# Token attributes (bit set), as llama.cpp's llama_token_attr.
ATTR_UNDEFINED = 0
ATTR_UNKNOWN = 1 << 0
ATTR_UNUSED = 1 << 1
ATTR_NORMAL = 1 << 2
ATTR_CONTROL = 1 << 3
ATTR_USER_DEFINED = 1 << 4
ATTR_BYTE = 1 << 5
ATTR_NORMALIZED = 1 << 6
ATTR_LSTRIP = 1 << 7
ATTR_RSTRIP = 1 << 8
ATTR_SINGLE_WORD = 1 << 9

# tokenizer.ggml.token_type values -> attributes.
_TYPE_TO_ATTR = {0: ATTR_UNDEFINED, 1: ATTR_NORMAL, 2: ATTR_UNKNOWN, 3: ATTR_CONTROL, 4: ATTR_USER_DEFINED, 5: ATTR_UNUSED, 6: ATTR_BYTE}

# tokenizer.ggml.model -> algorithm.
SPM, BPE, WPM, UGM, RWKV = "spm", "bpe", "wpm", "ugm", "rwkv"
KNOWN_MODELS = {"llama": SPM, "gpt2": BPE, "gemma4": BPE, "bert": WPM, "t5": UGM, "rwkv": RWKV}

# tokenizer.ggml.pre -> (pre-tokenizer family, flag overrides). The family names the
# regex set in `pretokenize.PATTERNS`; the overrides are the per-name settings llama.cpp
# applies on top of the BPE defaults (clean_spaces=True, no BOS, merges honoured).
_PRE: dict[str, tuple[str, dict[str, Any]]] = {}


def _pre(family: str, names: Iterable[str], **flags: Any) -> None:
    for n in names:
        _PRE[n] = (family, flags)


_pre("default", ["default"])
_pre("llama3", ["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"],
     ignore_merges=True, add_bos=True)
_pre("deepseek-llm", ["deepseek-llm"], clean_spaces=False)
_pre("deepseek-coder", ["deepseek-coder"], clean_spaces=False)
_pre("deepseek3-llm", ["deepseek-v3"], clean_spaces=False)
_pre("falcon", ["falcon"])
_pre("gpt2", ["mpt"])
_pre("starcoder", ["starcoder"])
_pre("gpt2", ["gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum", "modern-bert", "exaone4"])
_pre("gpt2", ["jina-v1-en", "jina-v2-code", "roberta-bpe"], add_sep=True)
_pre("jais2", ["jais-2"])
_pre("gemma4", ["gemma4", "granite-embed-multi-311m"], escape_whitespaces=True)
_pre("starcoder", ["refact"])
_pre("starcoder", ["command-r"], clean_spaces=False)
_pre("qwen2", ["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2"], clean_spaces=False)
_pre("qwen35", ["qwen35"], clean_spaces=False)
_pre("qwen2", ["stablelm2", "megrez"])
_pre("gpt2", ["olmo"])
_pre("llama3", ["dbrx", "smaug-bpe"])
_pre("poro", ["poro-chat"], clean_spaces=False)
_pre("llama3", ["chatglm-bpe"], no_bos=True)
_pre("llama3", ["glm4", "glm5"], no_bos=True, ignore_merges=True)
_pre("viking", ["viking"], clean_spaces=False)
_pre("gpt2", ["jais"])
_pre("tekken", ["tekken"], clean_spaces=False, ignore_merges=True, add_bos=True)
_pre("starcoder", ["smollm"], clean_spaces=False)
_pre("starcoder", ["codeshell", "exaone", "minerva-7b", "mellum2"])
_pre("poro", ["bloom", "gpt3-finnish"])
_pre("exaone-moe", ["exaone-moe"])
_pre("chameleon", ["chameleon"], add_bos=True, clean_spaces=False)
_pre("gpt4o", ["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"], clean_spaces=False)
_pre("tiny-aya", ["tiny_aya", "cohere2moe"], clean_spaces=False)
_pre("superbpe", ["superbpe"], clean_spaces=False)
_pre("gpt2", ["trillion", "granite-docling"], clean_spaces=False)
_pre("bailingmoe", ["bailingmoe", "bailingmoe2", "llada-moe"], clean_spaces=False)
_pre("seed-coder", ["seed-coder"], clean_spaces=False)
_pre("qwen2", ["hunyuan", "solar-open"], clean_spaces=False)
_pre("deepseek3-llm", ["hunyuan-dense", "hy_v4", "joyai-llm"], clean_spaces=False)
_pre("ufakzeka", ["ufakzeka"], clean_spaces=False)
_pre("qwen2", ["grok-2"], clean_spaces=False)
_pre("laguna", ["laguna"], clean_spaces=False)
_pre("minicpm5", ["minicpm5"], ignore_merges=True)

KNOWN_PRE = frozenset(_PRE)

# Texts llama.cpp recognises special tokens by, when the file does not name them.
_EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
              "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>")
_EOM_TEXTS = ("<|eom_id|>",)
_FIM_PRE_TEXTS = ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                  "<|code_prefix|>", "<|prefix|>")
_FIM_SUF_TEXTS = ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                  "<|code_suffix|>", "<|suffix|>")
_FIM_MID_TEXTS = ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                  "<|code_middle|>", "<|middle|>")
_FIM_PAD_TEXTS = ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]")
_FIM_REP_TEXTS = ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>")
_FIM_SEP_TEXTS = ("<|file_sep|>",)
_EOG_TEXTS = frozenset((
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~[",
))
# gpt-oss: llama.cpp always renders these, whatever their type in the file.
_ALWAYS_RENDERED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")

# (slot, metadata key suffix) in the order llama.cpp reads them; later keys win.
_SPECIAL_KEYS = (
    ("bos", "bos_token_id"), ("eos", "eos_token_id"), ("eot", "eot_token_id"), ("eom", "eom_token_id"),
    ("unk", "unknown_token_id"), ("sep", "seperator_token_id"), ("pad", "padding_token_id"),
    ("mask", "mask_token_id"), ("fim_pre", "fim_pre_token_id"), ("fim_suf", "fim_suf_token_id"),
    ("fim_mid", "fim_mid_token_id"), ("fim_pad", "fim_pad_token_id"), ("fim_rep", "fim_rep_token_id"),
    ("fim_sep", "fim_sep_token_id"),
    # deprecated names of the FIM tokens
    ("fim_pre", "prefix_token_id"), ("fim_suf", "suffix_token_id"), ("fim_mid", "middle_token_id"),
)


@attrs.define(slots=False)
class Vocab:
    """Everything llama.cpp derives from `tokenizer.ggml.*`, for one file."""

    model: str  # tokenizer.ggml.model
    kind: str  # spm | bpe | wpm | ugm | rwkv
    pre: str  # tokenizer.ggml.pre as written ("" when absent)
    pre_family: str  # which pre-tokenizer pattern set (BPE only)
    tokens: list[str]
    scores: np.ndarray  # float32
    attrs: list[int]
    token_to_id: dict[str, int]
    special: dict[str, int | None]  # bos, eos, eot, eom, unk, sep, pad, mask, fim_*
    eog_ids: frozenset[int]
    special_tokens: list[int]  # control / user-defined / unknown, longest text first
    merges: dict[str, int]  # "left right" -> rank (BPE)
    add_space_prefix: bool = False
    add_bos: bool = False
    add_eos: bool = False
    add_sep: bool = False
    ignore_merges: bool = False
    clean_spaces: bool = False
    remove_extra_whitespaces: bool = False
    escape_whitespaces: bool = True
    treat_whitespace_as_suffix: bool = False
    lowercase: bool = False
    strip_accents: bool = False
    precompiled_charsmap: bytes = b""
    name: str = ""
    default_pad: int | None = None  # the kind's default padding id (llama.cpp's newline fallback)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


def _int_key(meta: dict, key: str) -> int | None:
    v = meta.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TokenizerError(f"metadata key {key!r} should be an integer token id, found {v!r}")
    return int(v)


def _bool_key(meta: dict, key: str) -> bool | None:
    v = meta.get(key)
    if v is None:
        return None
    if not isinstance(v, (bool, np.bool_)):
        raise TokenizerError(f"metadata key {key!r} should be a boolean, found {v!r}")
    return bool(v)


def default_special_ids(model: str, pre: str) -> dict[str, int | None]:
    """The special ids llama.cpp assumes for a tokenizer kind before reading the file's keys."""
    special: dict[str, int | None] = dict.fromkeys(
        ("bos", "eos", "eot", "eom", "unk", "sep", "pad", "mask", "fim_pre", "fim_suf", "fim_mid", "fim_pad",
         "fim_rep", "fim_sep"))
    if model == "llama":
        special.update(bos=1, eos=2, unk=0)
    elif model == "bert":
        special.update(bos=101, unk=100, sep=102, pad=0, mask=103)
    elif model == "t5":
        special.update(eos=1, unk=2, pad=0)
    elif model == "gpt2":
        special.update(bos=11, eos=11)
        if pre in ("chatglm-bpe", "glm4", "glm5"):
            special["bos"] = None
    return special


def special_ids_from_metadata(meta: dict) -> dict[str, int | None]:
    """Special ids as llama.cpp reads them, without building the vocabulary (for chat
    templates, which need only the BOS/EOS texts). EOT and FIM detection by text is not done."""
    model = meta.get("tokenizer.ggml.model", "")
    pre = meta.get("tokenizer.ggml.pre", "")
    tokens = meta.get("tokenizer.ggml.tokens")
    n = len(tokens) if isinstance(tokens, list) else 0
    special = default_special_ids(model if isinstance(model, str) else "", pre if isinstance(pre, str) else "")
    for slot in special:
        if special[slot] is not None and special[slot] >= n:
            special[slot] = None
    for slot, suffix in _SPECIAL_KEYS:
        v = meta.get("tokenizer.ggml." + suffix)
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 0 <= v < n:
            special[slot] = int(v)
    return special


def load_vocab(meta: dict, where: str = "the model file") -> Vocab:
    """Build the Vocab of a file from its metadata dict (GGUFFile.metadata)."""
    model = meta.get("tokenizer.ggml.model")
    if model is None:
        raise TokenizerError(f"{where} has no tokenizer (no tokenizer.ggml.model key); it cannot tokenize text")
    if model in ("no_vocab", "none"):
        raise TokenizerError(f"{where} declares no vocabulary (tokenizer.ggml.model = {model!r})")
    if model not in KNOWN_MODELS:
        raise TokenizerError(
            f"{where}: unknown tokenizer.ggml.model {model!r}; cera supports "
            f"{', '.join(sorted(KNOWN_MODELS))} (plamo2, hybriddna, whitespace and test are not implemented)"
        )
    kind = KNOWN_MODELS[model]
    pre = meta.get("tokenizer.ggml.pre", "")
    if not isinstance(pre, str):
        raise TokenizerError(f"{where}: tokenizer.ggml.pre should be a string, found {pre!r}")

    # Defaults per kind, as llama.cpp sets them before reading the file's keys.
    special: dict[str, int | None] = dict.fromkeys(
        ("bos", "eos", "eot", "eom", "unk", "sep", "pad", "mask", "fim_pre", "fim_suf", "fim_mid", "fim_pad",
         "fim_rep", "fim_sep"))
    flags = dict(add_space_prefix=False, add_bos=False, add_eos=False, add_sep=False, ignore_merges=False,
                 clean_spaces=False, escape_whitespaces=True)
    pre_family = ""
    merges: dict[str, int] = {}
    if kind == SPM:
        special.update(bos=1, eos=2, unk=0)
        flags.update(add_space_prefix=True, add_bos=True)
    elif kind == WPM:
        special.update(bos=101, unk=100, sep=102, pad=0, mask=103)
        flags.update(clean_spaces=True, add_bos=True, add_sep=True)
    elif kind == UGM:
        special.update(eos=1, unk=2, pad=0)
        flags.update(add_eos=True)
    elif kind == RWKV:
        pass
    elif kind == BPE:
        raw_merges = meta.get("tokenizer.ggml.merges")
        if raw_merges is None:
            raise TokenizerError(f"{where}: BPE tokenizer without tokenizer.ggml.merges; re-convert the model")
        if not isinstance(raw_merges, list) or (raw_merges and not isinstance(raw_merges[0], str)):
            raise TokenizerError(f"{where}: tokenizer.ggml.merges should be an array of strings")
        # llama.cpp splits a line at its first space after the first character, so the
        # pair (left, right) is found again as the key left + " " + right (the line); a
        # line without such a space is the pair ("", ""). The first rank of a pair wins.
        n_merges = len(raw_merges)
        merges = dict(zip(reversed(raw_merges), range(n_merges - 1, -1, -1), strict=True))
        odd = [line for line in raw_merges if line.find(" ", 1) < 0]
        if odd:
            for line in odd:
                merges.pop(line, None)
            first_odd = next(r for r, line in enumerate(raw_merges) if line.find(" ", 1) < 0)
            merges.setdefault(" ", first_odd)
            merges[" "] = min(merges[" "], first_odd)
        if model == "gemma4":
            pre = "gemma4"
        else:
            special.update(bos=11, eos=11)
        flags.update(clean_spaces=True, escape_whitespaces=False)
        name = pre or "default"
        if name not in _PRE:
            raise TokenizerError(
                f"{where}: unknown pre-tokenizer tokenizer.ggml.pre = {pre!r}; cera knows "
                f"{len(_PRE)} (those of llama.cpp's test vocabularies and more): {', '.join(sorted(_PRE))}"
            )
        pre_family, overrides = _PRE[name]
        for k, v in overrides.items():
            if k == "no_bos":
                special["bos"] = None
            else:
                flags[k] = v
    default_pad = special["pad"]
    v = _bool_key(meta, "tokenizer.ggml.add_space_prefix")
    if v is not None:
        flags["add_space_prefix"] = v
    remove_extra_ws = bool(_bool_key(meta, "tokenizer.ggml.remove_extra_whitespaces") or False)

    tokens = meta.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise TokenizerError(f"{where}: no tokenizer.ggml.tokens (the vocabulary) in the metadata")
    if not isinstance(tokens, list) or (tokens and not isinstance(tokens[0], str)):
        raise TokenizerError(f"{where}: tokenizer.ggml.tokens should be an array of strings")
    n = len(tokens)
    if n == 0:
        raise TokenizerError(f"{where}: tokenizer.ggml.tokens is empty")
    if "" in tokens:  # llama.cpp names empty tokens
        tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]

    scores_raw = meta.get("tokenizer.ggml.scores")
    if scores_raw is None:
        scores = np.zeros(n, np.float32)
    else:
        arr = np.asarray(scores_raw)
        if arr.dtype not in (np.float32, np.int32) or arr.ndim != 1:
            raise TokenizerError(f"{where}: tokenizer.ggml.scores should be an array of float32 or int32")
        if len(arr) < n:
            raise TokenizerError(f"{where}: tokenizer.ggml.scores has {len(arr)} entries for {n} tokens")
        scores = arr[:n].astype(np.float32)

    types = meta.get("tokenizer.ggml.token_type")
    if types is None:
        attr_arr = np.full(n, ATTR_NORMAL, dtype=np.int32)
    else:
        tarr = np.asarray(types)
        if tarr.dtype != np.int32 or tarr.ndim != 1:
            raise TokenizerError(f"{where}: tokenizer.ggml.token_type should be an array of int32")
        if len(tarr) < n:
            raise TokenizerError(f"{where}: tokenizer.ggml.token_type has {len(tarr)} entries for {n} tokens")
        lut = np.zeros(8, dtype=np.int32)  # unknown type values map to "undefined"
        for t, a in _TYPE_TO_ATTR.items():
            lut[t] = a
        tv = tarr[:n]
        attr_arr = np.where((tv >= 0) & (tv < 8), lut[np.clip(tv, 0, 7)], ATTR_UNDEFINED).astype(np.int32)

    token_to_id = dict(zip(tokens, range(n), strict=True))
    if len(token_to_id) != n:
        raise TokenizerError(f"{where}: the vocabulary has duplicate token texts ({n - len(token_to_id)} of them)")

    # Special ids from the file. A default out of range is dropped; a file value out of
    # range is ignored (llama.cpp warns and keeps the default).
    for slot in special:
        if special[slot] is not None and special[slot] >= n:
            special[slot] = None
    for slot, suffix in _SPECIAL_KEYS:
        v = _int_key(meta, "tokenizer.ggml." + suffix)
        if v is not None and 0 <= v < n:
            special[slot] = v

    for flag, key in (("add_bos", "add_bos_token"), ("add_eos", "add_eos_token"), ("add_sep", "add_sep_token")):
        v = _bool_key(meta, "tokenizer.ggml." + key)
        if v is not None:
            flags[flag] = v
    if pre_family == "gemma4" and not flags["add_bos"]:
        flags["add_bos"] = True  # llama.cpp forces BOS for Gemma 4

    # BERT normaliser options: llama.cpp lowercases and strips accents unless told otherwise.
    v = _bool_key(meta, "tokenizer.ggml.normalizer.lowercase")
    lowercase = True if v is None else v
    v = _bool_key(meta, "tokenizer.ggml.normalizer.strip_accents")
    strip_accents = lowercase if v is None else v

    # Special tokens recognised by their text, when the file does not say. Where several
    # candidates exist llama.cpp takes the first one its hash map yields (see hashorder).
    from .hashorder import first_in_map_order

    def detect(slot: str, texts: tuple[str, ...]) -> None:
        if special[slot] is not None:
            return
        found = [token_to_id[t] for t in texts if t in token_to_id]
        if not found:
            return
        tid = found[0] if len(found) == 1 else first_in_map_order(tokens, found)
        special[slot] = tid
        attr[tid] |= ATTR_CONTROL

    attr = attr_arr.tolist()
    detect("eot", _EOT_TEXTS)
    detect("eom", _EOM_TEXTS)
    detect("fim_pre", _FIM_PRE_TEXTS)
    detect("fim_suf", _FIM_SUF_TEXTS)
    detect("fim_mid", _FIM_MID_TEXTS)
    detect("fim_pad", _FIM_PAD_TEXTS)
    detect("fim_rep", _FIM_REP_TEXTS)
    detect("fim_sep", _FIM_SEP_TEXTS)

    # Control tokens with "unused" in their text are unused.
    for i in np.flatnonzero(np.array(attr, dtype=np.int32) & ATTR_CONTROL).tolist():
        if "unused" in tokens[i]:
            attr[i] |= ATTR_UNUSED

    eog: set[int] = set()
    for slot in ("fim_pad", "fim_rep", "fim_sep"):
        if special[slot] is not None:
            eog.add(special[slot])
    for t in _EOG_TEXTS:
        tid = token_to_id.get(t)
        if tid is not None:
            eog.add(tid)
            attr[tid] |= ATTR_CONTROL
    for t in _ALWAYS_RENDERED:
        tid = token_to_id.get(t)
        if tid is not None:
            attr[tid] = ATTR_USER_DEFINED
    for slot in ("eos", "eot", "eom"):
        if special[slot] is not None:
            eog.add(special[slot])
    # o200k_harmony / solar-open: "<|end|>" ends a message, not the generation.
    texts = {tokens[i]: i for i in eog}
    if "<|end|>" in texts and (("<|return|>" in texts and ("<|call|>" in texts or "<|calls|>" in texts))
                               or (("<|call|>" in texts or "<|calls|>" in texts) and "<|flush|>" in texts)):
        eog.discard(texts["<|end|>"])
        attr[texts["<|end|>"]] = ATTR_USER_DEFINED
    # Gemma 4 and PLaMo have an ordinary "</s>".
    if "</s>" in texts and ("<|tool_response>" in texts or "<|plamo:eos|>" in texts):
        eog.discard(texts["</s>"])
        attr[texts["</s>"]] = ATTR_NORMAL

    special_tokens = np.flatnonzero(
        np.array(attr, dtype=np.int32) & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN)
    ).tolist()
    # llama.cpp sorts by text length, longest first (std::sort; equal lengths in no set
    # order: we keep id order, which only matters for overlapping special texts).
    special_tokens.sort(key=lambda i: -len(tokens[i].encode("utf-8", "surrogateescape")))

    # Attribute fix-ups by model name / architecture (after the special-token list).
    name = str(meta.get("general.name", "") or "").lower()
    arch = str(meta.get("general.architecture", "") or "")
    if any(s in pre for s in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or any(
        s in arch for s in ("nomic-bert-moe", "jina-bert-v3")
    ):
        if "<mask>" in token_to_id:
            attr[token_to_id["<mask>"]] |= ATTR_LSTRIP
    elif "phi-3" in name or "phi3" in name:
        for i in special_tokens:
            attr[i] |= ATTR_RSTRIP
        if "</s>" in token_to_id:
            attr[token_to_id["</s>"]] |= ATTR_RSTRIP
        for t in ("<unk>", "<s>", "<|endoftext|>"):
            if t in token_to_id:
                attr[token_to_id[t]] &= ~ATTR_RSTRIP
    elif "modern-bert" in name:
        if "[MASK]" in token_to_id:
            attr[token_to_id["[MASK]"]] |= ATTR_LSTRIP

    charsmap = b""
    if kind == UGM and meta.get("tokenizer.ggml.precompiled_charsmap") is not None:
        cm = np.asarray(meta["tokenizer.ggml.precompiled_charsmap"])
        if cm.dtype not in (np.int8, np.uint8):
            raise TokenizerError(f"{where}: tokenizer.ggml.precompiled_charsmap should be an array of bytes")
        charsmap = cm.astype(np.uint8).tobytes()

    return Vocab(
        model=model, kind=kind, pre=pre, pre_family=pre_family, tokens=tokens, scores=scores, attrs=attr,
        token_to_id=token_to_id, special=special, eog_ids=frozenset(eog), special_tokens=special_tokens,
        merges=merges, add_space_prefix=flags["add_space_prefix"], add_bos=flags["add_bos"],
        add_eos=flags["add_eos"], add_sep=flags["add_sep"], ignore_merges=flags["ignore_merges"],
        clean_spaces=flags["clean_spaces"], remove_extra_whitespaces=remove_extra_ws,
        escape_whitespaces=flags["escape_whitespaces"], lowercase=lowercase, strip_accents=strip_accents,
        precompiled_charsmap=charsmap, name=name,
        default_pad=default_pad if default_pad is not None and default_pad < n else None,
    )
