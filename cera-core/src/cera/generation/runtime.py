"""Running forward passes of one loaded model: graphs built and compiled once per shape.

A `Runner` belongs to a loaded model (one model, one backend, its uploaded weights) and
is shared by every session of it. For each shape class (the batch `Layout`, the wanted
`Outputs`, the state's `cera.state.shape_key`) it builds the family's graph once, has the backend
compile it once, and keeps the executable (least recently used ones are dropped past
``cache_size``). `forward` is one pass: reserve the sequences' cells in their state
slots, run, keep the cells (or forget them if the pass failed).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import attrs
import numpy as np

from ..backend import StepInputs
from ..errors import SessionError, UnsupportedOperation
from ..graph.builder import EMBEDS, Layout, Outputs
from ..kv_types import TURBOQUANT_BITS
from ..state import shape_key


@attrs.frozen
class SeqStep:
    """One sequence's part of a batch: its state slot and the tokens to evaluate there."""

    slot: int
    tokens: tuple[int, ...] = attrs.field(converter=tuple)
    positions: tuple[int, ...] = attrs.field(converter=tuple)


class Runner:
    def __init__(self, model, backend, weights: dict, cache_size: int = 24):
        self.model = model
        self.backend = backend
        self.weights = weights
        self.cache_size = cache_size
        self._cache: OrderedDict = OrderedDict()
        self._layouts: dict[tuple, Layout] = {}  # made once per shape: a Layout checks itself when made
        self._lock = threading.Lock()
        self._last: tuple | None = None  # (key, executable) of the latest pass
        self.n_compiled = 0  # graphs compiled so far (for tests and diagnostics)
        # () -> the token ids TurboQuant caches calibrate their key offsets on (`key_offsets`);
        # the loaded model sets it (its tokenizer); None: such caches keep keys as they are
        self.calibration_tokens = None

    def new_state(self, n_ctx: int, n_slots: int = 1, kv_type: str = "f16", n_batch: int = 512, swa_full: bool = False):
        extra = {}
        if kv_type in TURBOQUANT_BITS:
            from .key_offsets import key_offsets

            offsets = key_offsets(self)
            if offsets:
                extra["key_offsets"] = offsets
        return self.backend.new_state(self.model.state, n_ctx, n_slots=n_slots, kv_type=kv_type, n_batch=n_batch,
                                      swa_full=swa_full, **extra)  # fmt: skip

    def prefill(self, state, slot: int, tokens) -> None:
        """Evaluate ``tokens`` at positions 0.. of an empty ``slot`` in one pass, reading nothing back."""
        tokens = tuple(int(t) for t in tokens)
        self.forward(state, [SeqStep(slot, tokens, tuple(range(len(tokens))))], Outputs(), prompt_rows=True)

    def executable(self, layout: Layout, outputs: Outputs, state, adapters=None):
        key = (layout, outputs, shape_key(state), self.backend.compile_key())
        if adapters:  # LoRA adapters (`cera.adapters.ActiveAdapters`): a graph of their own
            key = key + (adapters.key,)
        last = self._last  # decoding asks for the same graph token after token
        if last is not None and last[0] == key:  # (its parts are the same objects: compared by identity)
            return last[1]
        with self._lock:
            exe = self._cache.get(key)
            if exe is not None:
                self._cache.move_to_end(key)
                self._last = (key, exe)
                return exe
        if outputs.vocab and not self.backend.weight_row_prefix:
            raise UnsupportedOperation(
                f"the {self.backend.name} backend computes a model's output head over the whole vocabulary only; "
                f"ask for every token's logits (Outputs.vocab 0; with a draft model, draft_vocab=0 / --draft-vocab 0)"
            )
        graph = self.model.build(layout, outputs, n_ctx=state.n_ctx, adapters=adapters)
        exe = self.backend.compile(graph, self.weights, state)
        with self._lock:
            self._cache[key] = exe
            self.n_compiled += 1
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
            self._last = (key, exe)
        return exe

    def forward(self, state, steps: list[SeqStep], outputs: Outputs, exact_rows: bool = False,
                prompt_rows: bool = False, adapters=None, embeds: np.ndarray | None = None) -> dict[str, np.ndarray]:  # fmt: skip
        """Evaluate each sequence's tokens in its slot, as one batch (``exact_rows`` and
        ``prompt_rows``: see `cera.graph.builder.Layout`), with the LoRA ``adapters``
        (`cera.adapters.ActiveAdapters`, the same for every sequence of the batch).
        ``embeds``: the rows' input vectors ``[n_tokens, n_embd]`` (an image's embeddings)
        instead of the tokens' own; the tokens then only stand for them in the session's record."""
        if not steps:
            raise SessionError("a forward pass needs at least one sequence")
        lens = (len(steps[0].tokens),) if len(steps) == 1 else tuple(len(s.tokens) for s in steps)
        with_embeds = embeds is not None
        shape = (lens, exact_rows, prompt_rows, with_embeds)
        layout = self._layouts.get(shape)
        if layout is None:
            layout = Layout(shape[0], exact_rows=exact_rows, prompt_rows=prompt_rows, embeds=with_embeds)
            if len(self._layouts) < 4096:
                self._layouts[shape] = layout
        exe = self.executable(layout, outputs, state, adapters)
        extra = {}
        if with_embeds:
            if EMBEDS not in exe.graph.inputs:
                raise UnsupportedOperation(
                    f"the {self.model.family} family takes token ids only, not embeddings (images need a family that "
                    f"feeds them, such as lfm2)"
                )
            want = exe.graph.inputs[EMBEDS].shape
            if tuple(embeds.shape) != tuple(want):
                raise SessionError(f"embeddings of shape {tuple(embeds.shape)} for a pass of {want}")
            extra = {EMBEDS: embeds}
        started: list[int] = []
        try:
            starts = []
            for s in steps:
                if s.slot in started:
                    raise SessionError(f"slot {s.slot} appears twice in one batch")
                starts.append(state.begin(s.slot, s.positions))
                started.append(s.slot)
            if len(steps) == 1:  # a session's own pass: its tuples as they are
                tokens, positions = steps[0].tokens, steps[0].positions
            else:
                tokens = [t for s in steps for t in s.tokens]
                positions = [p for s in steps for p in s.positions]
            pos = np.array(positions, np.int32)
            inputs = StepInputs(
                tokens=np.zeros(len(tokens), np.int32) if with_embeds else np.array(tokens, np.int32),
                positions=pos,
                slots=np.array([s.slot for s in steps], np.int32),
                starts=np.array(starts, np.int32),
                extra={**self.model.position_inputs(pos), **extra},
            )
            out = exe.run(state, inputs)
        except BaseException:
            for slot in started:
                state.rollback(slot)
            raise
        for slot in started:
            state.commit(slot)
        return out


__all__ = ["Runner", "SeqStep"]
