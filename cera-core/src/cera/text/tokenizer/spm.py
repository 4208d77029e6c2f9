"""SentencePiece-style BPE with scores and byte fallback, as llama.cpp's llm_tokenizer_spm.

The text's characters start as symbols. The adjacent pair whose concatenation is a
token with the highest score is merged (ties: leftmost first), until no pair forms a
token. A final symbol that is no token is written as byte tokens (<0xXX>). Unlike BPE
this runs over a whole text fragment, not per word.
"""

from __future__ import annotations

import heapq

from ...errors import TokenizerError


class SPMEncoder:
    def __init__(self, token_to_id: dict[str, int], scores):
        self.token_to_id = token_to_id
        self.scores = scores.tolist() if hasattr(scores, "tolist") else list(scores)
        self._byte_ids: dict[int, int] = {}
        # Each token's place in score order (highest first, equal scores sharing one), so a
        # queue entry is one int, place << 32 | left: the order of (-score, left) tuples at
        # a fraction of their memory on long texts.
        order = {sc: k for k, sc in enumerate(sorted(set(self.scores), reverse=True))}
        self.place = [order[sc] for sc in self.scores]

    def encode(self, text: str, out: list[int]) -> None:
        t2i = self.token_to_id
        place = self.place
        texts = list(text)
        n = len(texts)
        if n == 0:
            return
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prv = list(range(-1, n - 1))
        heap = []
        for i in range(n - 1):
            tid = t2i.get(texts[i] + texts[i + 1])
            if tid is not None:
                heap.append(place[tid] << 32 | i)
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
            pair = lt + texts[right]
            tid = t2i.get(pair)
            if tid is None or place[tid] != key >> 32:
                continue  # one side was merged since this pair was queued
            texts[left] = pair
            texts[right] = ""
            after = nxt[right]
            nxt[left] = after
            if after >= 0:
                prv[after] = left
            before = prv[left]
            if before >= 0:
                tid = t2i.get(texts[before] + pair)
                if tid is not None:
                    push(heap, place[tid] << 32 | before)
            if after >= 0:
                tid = t2i.get(pair + texts[after])
                if tid is not None:
                    push(heap, place[tid] << 32 | left)
        append = out.append
        i = 0
        while i >= 0:
            s = texts[i]
            tid = t2i.get(s)
            if tid is not None:
                append(tid)
            else:
                for b in s.encode("utf-8", "surrogatepass"):
                    append(self.byte_token(b))
            i = nxt[i]

    def byte_token(self, b: int) -> int:
        tid = self._byte_ids.get(b)
        if tid is None:
            tid = self.token_to_id.get(f"<0x{b:02X}>")
            if tid is None:
                tid = self.token_to_id.get(bytes([b]).decode("utf-8", "surrogateescape"))
            if tid is None:
                raise TokenizerError(
                    f"the vocabulary has no token for byte 0x{b:02X} (neither <0x{b:02X}> nor the byte itself), "
                    f"so this text cannot be tokenized"
                )
            self._byte_ids[b] = tid
        return tid
