"""The Streaming Sortformer's arrival-order speaker cache and FIFO, and their update.

Each streaming step runs the encoder over ``[speaker cache; FIFO; chunk]`` (pre-encoded
frames, ``d_model`` values each) and gets speaker probabilities for all of them. The chunk
(without its left and right context frames) joins the FIFO; when the FIFO overflows, its
oldest frames (at least ``spkcache_update_period``) move to the speaker cache, and their
silent frames (probabilities summing under ``sil_threshold``) update the mean silence
embedding. When the cache grows past ``spkcache_len`` it is compressed back: frames are
scored per speaker by how confidently that speaker alone speaks (log probabilities, floored
at ``pred_score_threshold``), frames where a speaker is silent (or overlapped, once a
speaker has enough clean frames) are left out, the newest frames get a small boost, each
speaker's best frames a strong then a weak boost (so every speaker keeps some), and
``spkcache_sil_frames_per_spk`` places per speaker are reserved for the mean silence
embedding. The ``spkcache_len`` best (frame, speaker) pairs are kept in frame order within
speaker order, which keeps speakers in order of arrival. This is NeMo's synchronous
``streaming_update`` and ``_compress_spkcache`` at inference (no speaker permutation, no
score noise), for one stream, in numpy.
"""

from __future__ import annotations

import math

import numpy as np


class SpeakerCache:
    def __init__(self, d_model: int, n_speakers: int, settings: dict):
        self.d = int(d_model)
        self.n_spk = int(n_speakers)
        s = dict(settings)
        self.spkcache_len = s["spkcache_len"]
        self.fifo_len = s["fifo_len"]
        self.update_period = s["spkcache_update_period"]
        self.sil_frames = s["spkcache_sil_frames_per_spk"]
        self.pred_score_threshold = s["pred_score_threshold"]
        self.boost_latest = s["scores_boost_latest"]
        self.sil_threshold = s["sil_threshold"]
        self.strong_boost_rate = s["strong_boost_rate"]
        self.weak_boost_rate = s["weak_boost_rate"]
        self.min_pos_scores_rate = s["min_pos_scores_rate"]
        self.reset()

    def reset(self) -> None:
        self.spkcache = np.zeros((0, self.d), np.float32)
        self.spkcache_preds: np.ndarray | None = None
        self.fifo = np.zeros((0, self.d), np.float32)
        self.mean_sil_emb = np.zeros(self.d, np.float32)
        self.n_sil_frames = 0

    def context(self) -> np.ndarray:
        """The frames that go before the next chunk: ``[speaker cache; FIFO]``."""
        return np.concatenate([self.spkcache, self.fifo])

    def update(self, chunk: np.ndarray, preds: np.ndarray, lc: int, rc: int) -> np.ndarray:
        """Take one step's chunk of pre-encoded frames (with ``lc`` / ``rc`` context frames)
        and the probabilities ``preds`` of ``[cache; FIFO; chunk]``; returns the chunk's own
        probabilities ``[chunk frames, n_speakers]``."""
        n_cache, n_fifo = len(self.spkcache), len(self.fifo)
        n_chunk = len(chunk) - lc - rc
        fifo_preds = preds[n_cache : n_cache + n_fifo]
        chunk = chunk[lc : lc + n_chunk]
        chunk_preds = preds[n_cache + n_fifo + lc : n_cache + n_fifo + lc + n_chunk]
        self.fifo = np.concatenate([self.fifo, chunk])
        fifo_preds = np.concatenate([fifo_preds, chunk_preds])
        if n_fifo + n_chunk > self.fifo_len:
            pop = max(self.update_period, n_chunk - self.fifo_len + n_fifo)
            pop = min(pop, n_fifo + n_chunk)
            pop_embs, pop_preds = self.fifo[:pop], fifo_preds[:pop]
            self._silence_profile(pop_embs, pop_preds)
            self.fifo = self.fifo[pop:]
            self.spkcache = np.concatenate([self.spkcache, pop_embs])
            if self.spkcache_preds is not None:
                self.spkcache_preds = np.concatenate([self.spkcache_preds, pop_preds])
            if len(self.spkcache) > self.spkcache_len:
                if self.spkcache_preds is None:  # the first compression: the cache's own predictions
                    self.spkcache_preds = np.concatenate([preds[:n_cache], pop_preds])
                self.spkcache, self.spkcache_preds = self._compress(self.spkcache, self.spkcache_preds)
        return chunk_preds

    def _silence_profile(self, embs: np.ndarray, preds: np.ndarray) -> None:
        is_sil = preds.sum(axis=1) < self.sil_threshold
        count = int(is_sil.sum())
        if count == 0:
            return
        total = self.mean_sil_emb * self.n_sil_frames + embs[is_sil].sum(axis=0)
        self.n_sil_frames += count
        self.mean_sil_emb = (total / max(self.n_sil_frames, 1)).astype(np.float32)

    def _scores(self, preds: np.ndarray) -> np.ndarray:
        thr = self.pred_score_threshold
        log_p = np.log(np.maximum(preds, thr))
        log_1p = np.log(np.maximum(1.0 - preds, thr))
        return log_p - log_1p + log_1p.sum(axis=1, keepdims=True) - math.log(0.5)

    @staticmethod
    def _boost(scores: np.ndarray, n: int, scale: float) -> np.ndarray:
        if n <= 0:
            return scores
        top = np.argsort(-scores, axis=0, kind="stable")[:n]  # per speaker
        cols = np.arange(scores.shape[1])[None, :].repeat(len(top), 0)
        scores[top, cols] -= scale * math.log(0.5)  # -inf stays -inf
        return scores

    def _compress(self, embs: np.ndarray, preds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n_frames, n_spk = preds.shape
        per_spk = self.spkcache_len // n_spk - self.sil_frames
        strong = math.floor(per_spk * self.strong_boost_rate)
        weak = math.floor(per_spk * self.weak_boost_rate)
        min_pos = math.floor(per_spk * self.min_pos_scores_rate)
        p64 = preds.astype(np.float32)
        scores = self._scores(p64).astype(np.float32)
        is_speech = p64 > 0.5
        scores = np.where(is_speech, scores, -np.inf).astype(np.float32)
        is_pos = scores > 0
        replace = ~is_pos & is_speech & (is_pos.sum(axis=0, keepdims=True) >= min_pos)
        scores = np.where(replace, -np.inf, scores).astype(np.float32)
        if self.boost_latest > 0:
            scores[self.spkcache_len :] += np.float32(self.boost_latest)
        scores = self._boost(scores, strong, 2.0)
        scores = self._boost(scores, weak, 1.0)
        if self.sil_frames > 0:
            scores = np.concatenate([scores, np.full((self.sil_frames, n_spk), np.inf, np.float32)])
        n_all = scores.shape[0]
        flat = scores.T.reshape(-1)  # speaker major, frames in order within a speaker
        top = np.argsort(-flat, kind="stable")[: self.spkcache_len]
        valid = flat[top] != -np.inf
        top = np.sort(np.where(valid, top, np.iinfo(np.int64).max))
        disabled = top == np.iinfo(np.int64).max
        frame = np.where(disabled, 0, top % n_all)
        disabled |= frame >= n_all - self.sil_frames
        frame[disabled] = 0
        out_embs = np.where(disabled[:, None], self.mean_sil_emb[None, :], embs[frame]).astype(np.float32)
        out_preds = np.where(disabled[:, None], 0.0, preds[frame]).astype(np.float32)
        return out_embs, out_preds
