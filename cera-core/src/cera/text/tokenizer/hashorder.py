"""Which of several candidate tokens llama.cpp meets first in its token-text hash map.

When a file does not name its end-of-turn (or fill-in-the-middle) token, llama.cpp finds
it by text, walking its `std::unordered_map<std::string, llama_token>` and taking the
first candidate it meets. With several candidates (Qwen has both "<|im_end|>" and
"<|endoftext|>", SmolLM2 too) the winner is decided by the map's iteration order, which
depends on the C++ standard library. This module reproduces that order for GNU libstdc++
(Linux builds of llama.cpp, including llama-cpp-python's wheels), so `Tokenizer.eot_id`
agrees with the llama.cpp we test against. libc++ (macOS) and MSVC builds of llama.cpp may
pick another candidate; every candidate is an end-of-generation token either way.

The facts used, all of libstdc++'s (bits/hashtable.h, hashtable_policy.h, hash_bytes.cc):
- std::hash<std::string> is `_Hash_bytes(data, len, 0xc70f6907)`, a 64-bit MurmurHash2 variant;
- the map starts with one bucket; it rehashes before an insert that would exceed the
  load factor 1, to 13 buckets first and then to the smallest prime of libstdc++'s prime
  list not below twice the bucket count (the growth chain below);
- nodes sit in one singly linked list, each bucket's nodes contiguous. An insert into an
  empty bucket puts the node at the front of the list, otherwise at the front of its
  bucket's run. A rehash walks the old list and does the same into the new buckets.
"""

from __future__ import annotations

import numpy as np

_SEED = 0xC70F6907
_MUL = np.uint64(0xC6A4A7935BD1E995)
_M64 = (1 << 64) - 1

# Bucket counts a libstdc++ unordered_map goes through as it grows one insert at a time
# (taken from libstdc++'s __prime_list: 13, then the first listed prime >= twice the last).
_GROWTH = (
    13, 29, 59, 127, 257, 541, 1109, 2357, 5087, 10273, 20753, 42043, 85229, 172933, 351061, 712697, 1447153,
    2938679, 5967347, 12117689, 24607243, 49969847, 101473717, 206062531, 418451333, 849749479, 1725587117,
)


def _shift_mix(v: np.ndarray) -> np.ndarray:
    return v ^ (v >> np.uint64(47))


def hash_bytes(texts: list[bytes]) -> np.ndarray:
    """libstdc++'s std::hash of each byte string, vectorised (uint64)."""
    n = len(texts)
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=n)
    offsets = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    buf = np.frombuffer(b"".join(texts) + b"\0" * 8, dtype=np.uint8)
    with np.errstate(over="ignore"):
        h = np.uint64(_SEED) ^ (lengths.astype(np.uint64) * _MUL)
        n_words = lengths // 8
        for k in range(int(n_words.max()) if n else 0):
            sel = np.flatnonzero(n_words > k)
            base = offsets[sel] + 8 * k
            word = np.zeros(len(sel), dtype=np.uint64)
            for j in range(8):
                word |= buf[base + j].astype(np.uint64) << np.uint64(8 * j)
            h[sel] = (h[sel] ^ (_shift_mix(word * _MUL) * _MUL)) * _MUL
        tail = lengths & 7
        sel = np.flatnonzero(tail)
        base = offsets[sel] + 8 * n_words[sel]
        word = np.zeros(len(sel), dtype=np.uint64)
        for j in range(7):
            has = tail[sel] > j
            word[has] |= buf[base[has] + j].astype(np.uint64) << np.uint64(8 * j)
        h[sel] = (h[sel] ^ word) * _MUL
        h = _shift_mix(_shift_mix(h) * _MUL)
    return h


def map_order(texts: list[bytes]) -> np.ndarray:
    """Indices of `texts` in the iteration order of a libstdc++ unordered_map filled by
    inserting texts[0], texts[1], ... in turn (texts must be distinct)."""
    n = len(texts)
    h = hash_bytes(texts)
    order = np.zeros(0, dtype=np.int64)
    start = 0
    for i, buckets in enumerate(_GROWTH):
        if start >= n:
            break
        stop = min(n, buckets) if i + 1 < len(_GROWTH) else n
        hb = h % np.uint64(buckets)
        if len(order):
            order = _rehash(order, hb, buckets)
        order = _insert(order, np.arange(start, stop), hb)
        start = stop
    return order


def _rehash(order: np.ndarray, hb: np.ndarray, buckets: int) -> np.ndarray:
    # Walking the list: a node whose bucket is new goes to the list front, otherwise to the
    # front of its bucket's run. So runs come in reverse order of their first node, and
    # nodes within a run in reverse walking order.
    b = hb[order].astype(np.int64)
    pos = np.arange(len(order))
    first = np.empty(buckets, dtype=np.int64)
    first[b[::-1]] = pos[::-1]  # the earliest position of each bucket wins
    return order[np.lexsort((-pos, -first[b]))]


def _insert(order: np.ndarray, new: np.ndarray, hb: np.ndarray) -> np.ndarray:
    # New runs (buckets empty before) come first, latest created first; then the old runs
    # in their old order. Within a run: new nodes latest first, then old nodes in order.
    m, k = len(order), len(new)
    old_b = hb[order]
    new_b = hb[new]
    # first position of each bucket in the old list (a bucket's nodes are contiguous)
    ub, ufirst, uinv = np.unique(old_b, return_index=True, return_inverse=True)
    # for each new node: is its bucket already in the list, and where does its run start
    at = np.searchsorted(ub, new_b)
    at_clipped = np.minimum(at, max(len(ub) - 1, 0))
    in_old = (at < len(ub)) & (ub[at_clipped] == new_b) if len(ub) else np.zeros(k, dtype=bool)
    # for buckets created by this batch: the insert that created them
    _, nfirst, ninv = np.unique(new_b, return_index=True, return_inverse=True)

    g_class = np.concatenate([np.ones(m, np.int64), np.where(in_old, 1, 0)])
    g_rank = np.concatenate([ufirst[uinv], np.where(in_old, ufirst[at_clipped] if len(ub) else 0, -nfirst[ninv])])
    e_class = np.concatenate([np.ones(m, np.int64), np.zeros(k, np.int64)])
    e_rank = np.concatenate([np.arange(m), -np.arange(k)])
    allnodes = np.concatenate([order, new])
    return allnodes[np.lexsort((e_rank, e_class, g_rank, g_class))]


def first_in_map_order(tokens: list[str], candidates: list[int]) -> int:
    """The candidate id llama.cpp (on libstdc++) meets first in its token_to_id map."""
    texts = [t.encode("utf-8", "surrogateescape") for t in tokens]
    order = map_order(texts)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return min(candidates, key=lambda i: rank[i])
