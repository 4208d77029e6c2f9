"""Byte-pair encoding of one pre-tokenized word, as llama.cpp's llm_tokenizer_bpe_session.

The word's characters start as symbols; the adjacent pair with the lowest merge rank is
merged (ties: leftmost first) until no pair has a rank. Results are cached per word, so
a long text costs one dictionary look-up for each word seen before.
"""

from __future__ import annotations

import heapq


class BPEEncoder:
    def __init__(self, token_to_id: dict[str, int], merges: dict[str, int], *, ignore_merges: bool,
                 byte_tokens_hex: bool, whole_newline_words: bool):
        self.token_to_id = token_to_id
        self.merges = merges
        self.ignore_merges = ignore_merges
        # Gemma 4 style vocabularies spell byte fallback tokens <0xXX>; GPT-2 style ones
        # fall back to the single-byte strings.
        self.byte_tokens_hex = byte_tokens_hex
        # Gemma 4: a word of newlines only is taken whole when it is a token.
        self.whole_newline_words = whole_newline_words
        self.cache: dict[str, tuple[int, ...]] = {}

    def encode_word(self, word: str) -> tuple[int, ...]:
        ids = self.cache.get(word)
        if ids is None:
            ids = self._encode(word)
            if len(self.cache) > 200_000:
                self.cache.clear()
            self.cache[word] = ids
        return ids

    def _encode(self, word: str) -> tuple[int, ...]:
        t2i = self.token_to_id
        if self.ignore_merges and word in t2i:
            return (t2i[word],)
        if self.whole_newline_words and word.strip("\n") == "" and word in t2i:
            return (t2i[word],)
        n = len(word)
        if n == 0:
            return ()
        if n == 1:
            syms = [word]
        else:
            syms = self._merge(word)
        out = []
        for s in syms:
            tid = t2i.get(s)
            if tid is not None:
                out.append(tid)
            else:
                out.extend(self._bytes(s))
        return tuple(out)

    def _merge(self, word: str) -> list[str]:
        # The queue holds one int per candidate merge, rank << 32 | left: the same order as
        # (rank, left) tuples at a fraction of their memory. An entry is checked when it
        # comes out: the symbols at `left` and after it still merge with that rank (a rank
        # names exactly one pair), or the entry is stale and skipped.
        ranks = self.merges
        texts = list(word)
        n = len(texts)
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prv = list(range(-1, n - 1))
        heap = []
        for i in range(n - 1):
            r = ranks.get(texts[i] + " " + texts[i + 1])
            if r is not None:
                heap.append(r << 32 | i)
        if not heap:
            return texts
        heapq.heapify(heap)
        pop, push = heapq.heappop, heapq.heappush
        low = (1 << 32) - 1
        while heap:
            key = pop(heap)
            left = key & low
            right = nxt[left]
            lt = texts[left]
            if right < 0 or not lt:
                continue
            rt = texts[right]
            if ranks.get(lt + " " + rt) != key >> 32:
                continue  # stale: one side has changed since this pair was queued
            pair = lt + rt
            texts[left] = pair
            texts[right] = ""
            after = nxt[right]
            nxt[left] = after
            if after >= 0:
                prv[after] = left
            before = prv[left]
            if before >= 0:
                r = ranks.get(texts[before] + " " + pair)
                if r is not None:
                    push(heap, r << 32 | before)
            if after >= 0:
                r = ranks.get(pair + " " + texts[after])
                if r is not None:
                    push(heap, r << 32 | left)
        return [t for t in texts if t]

    def _bytes(self, symbol: str) -> list[int]:
        # A symbol that is no token: each of its UTF-8 bytes, as a byte token where one exists.
        out = []
        for b in symbol.encode("utf-8", "surrogatepass"):
            if self.byte_tokens_hex:
                key = f"<0x{b:02X}>"
            else:
                key = bytes([b]).decode("utf-8", "surrogateescape")
            tid = self.token_to_id.get(key)
            if tid is not None:
                out.append(tid)
        return out

