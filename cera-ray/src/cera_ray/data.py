"""Batch generation and embedding over a Ray Dataset.

`Generate` and `Embed` are callable classes for ``Dataset.map_batches``: Ray makes a pool of
actors, each constructs the class once (loading its own model from the `ModelSpec`) and
then calls it on batch after batch. Inside a batch, `Generate` runs the rows through the
model's batching scheduler, ``parallel`` sequences at a time, so their decode steps share
forward passes; each row's tokens are the tokens it gets alone (the scheduler's guarantee),
so results do not depend on how Ray splits the dataset.

`generate` and `embed` wrap ``map_batches`` with sensible sizes for the common case.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .spec import ModelSpec, RayConfigError


def _columns(batch) -> dict:
    """A batch as a dict of columns (Ray hands numpy dicts by default, pandas on request)."""
    if isinstance(batch, dict):
        return dict(batch)
    to_dict = getattr(batch, "to_dict", None)
    if to_dict is not None:  # a pandas DataFrame
        return {k: np.asarray(batch[k].to_list() if hasattr(batch[k], "to_list") else batch[k], dtype=object)
                for k in batch.columns}  # fmt: skip
    raise RayConfigError(f"a batch must be a dict of columns or a pandas DataFrame, got {type(batch).__name__}")


def _column(cols: dict, name: str, what: str):
    if name not in cols:
        raise RayConfigError(
            f"the batch has no column {name!r} ({what}); its columns: {', '.join(sorted(cols)) or 'none'}"
        )
    return cols[name]


class Generate:
    """A Ray Data callable: each row's prompt in, its generated text out.

    ``prompt_column``: a string (raw text, continued as written), a list of token ids, or,
    with ``chat=True``, a user message (string) or a list of OpenAI-style messages, rendered
    through the model's chat template (``system`` is put first where a row has none).
    Output columns: ``output_column`` (the text), ``finish_reason`` and
    ``completion_tokens``. ``options`` are cera's generation options (max_tokens,
    temperature, top_k, top_p, seed, stop, ...; as `cera.GenerateOptions`). A row that
    fails raises with its index, unless ``on_error="record"``: then its text is empty and an
    ``error`` column says why."""

    def __init__(self, spec=None, *, prompt_column: str = "prompt", output_column: str = "generated_text",
                 chat: bool = False, system: str | None = None, on_error: str = "raise", **options):  # fmt: skip
        from cera.generation.options import make_options

        if on_error not in ("raise", "record"):
            raise RayConfigError(f"on_error must be 'raise' or 'record', got {on_error!r}")
        self.spec = ModelSpec.of(spec)
        self.options = make_options(None, options)  # a bad option fails here, before the model loads
        self.prompt_column, self.output_column = prompt_column, output_column
        self.chat, self.system, self.on_error = bool(chat), system, on_error
        self.loaded = self.spec.load()
        self.scheduler = self.loaded.scheduler(n_slots=self.spec.parallel, n_ctx=self.spec.n_ctx)
        self._chat_prompt = None
        self._lock = threading.Lock()

    def _prompt(self, value) -> list[int]:
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if self.chat:
            from cera.chat.prompt import ChatPrompt

            messages = [{"role": "user", "content": value}] if isinstance(value, str) else value
            if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
                raise RayConfigError("with chat=True a prompt is a string or a list of {role, content} messages")
            if self.system is not None and not any(m.get("role") == "system" for m in messages):
                messages = [{"role": "system", "content": self.system}, *messages]
            with self._lock:
                if self._chat_prompt is None:
                    self._chat_prompt = ChatPrompt(self.loaded)
            return self._chat_prompt.prompt_ids(messages)
        if isinstance(value, str):
            return self.loaded.tokenize(value)
        if isinstance(value, list) and value and all(isinstance(t, (int, np.integer)) for t in value):
            return [int(t) for t in value]
        raise RayConfigError(f"a prompt is a string or a non-empty list of token ids, got {type(value).__name__}")

    def _one(self, value):
        session = self.scheduler.new_session()
        try:
            session.append_tokens(self._prompt(value))
            return session.generate(self.options)
        finally:
            session.close()

    def __call__(self, batch) -> dict:
        cols = _columns(batch)
        prompts = list(_column(cols, self.prompt_column, "the prompts"))
        texts, reasons, counts, errors = (
            [""] * len(prompts),
            [""] * len(prompts),
            [0] * len(prompts),
            [""] * len(prompts),
        )

        def work(i):
            try:
                s = self._one(prompts[i])
                texts[i], reasons[i], counts[i] = s.text, s.finish_reason.value, s.n_generated
                if s.error:
                    raise RayConfigError(s.error)
            except Exception as e:  # noqa: BLE001 - raised with the row's index or recorded
                if self.on_error == "raise":
                    raise RuntimeError(f"row {i} of the batch ({self.prompt_column}={prompts[i]!r:.80}): {e}") from e
                errors[i], reasons[i] = f"{type(e).__name__}: {e}", "error"

        # as many threads as the scheduler has slots: each runs one row at a time, and their
        # decode steps are batched by the scheduler
        with ThreadPoolExecutor(max_workers=self.spec.parallel) as pool:
            for f in [pool.submit(work, i) for i in range(len(prompts))]:
                f.result()
        cols[self.output_column] = np.array(texts, dtype=object)
        cols["finish_reason"] = np.array(reasons, dtype=object)
        cols["completion_tokens"] = np.array(counts, dtype=np.int64)
        if self.on_error == "record":
            cols["error"] = np.array(errors, dtype=object)
        return cols


class Embed:
    """A Ray Data callable: each row's text in, its embedding vector out (``output_column``,
    float32, L2-normalised unless ``normalize=False``; pooled as the model file says)."""

    def __init__(self, spec=None, *, text_column: str = "text", output_column: str = "embedding",
                 pooling: str | None = None, normalize: bool = True):  # fmt: skip
        if pooling == "none":
            raise RayConfigError(
                "pooling='none' gives a matrix per text, which a dataset column cannot hold; pick a pooling"
            )
        self.spec = ModelSpec.of(spec)
        self.text_column, self.output_column = text_column, output_column
        self.pooling, self.normalize = pooling, normalize
        self.loaded = self.spec.load()

    def __call__(self, batch) -> dict:
        cols = _columns(batch)
        texts = [str(t) if isinstance(t, np.str_) else t for t in _column(cols, self.text_column, "the texts")]
        bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
        if bad:
            raise RayConfigError(
                f"column {self.text_column!r} must hold strings; row {bad[0]} is {type(texts[bad[0]]).__name__}"
            )
        cols[self.output_column] = np.asarray(self.loaded.embed(texts, pooling=self.pooling, normalize=self.normalize),
                                              dtype=np.float32)  # fmt: skip
        return cols


def _map(dataset, cls, spec, concurrency, batch_size, constructor: dict):
    spec = ModelSpec.of(spec)
    return dataset.map_batches(
        cls,
        fn_constructor_kwargs={"spec": spec, **constructor},
        concurrency=concurrency,
        batch_size=batch_size,
        num_cpus=spec.threads or 1,  # each actor asks for the CPUs its threads use
    )


def generate(dataset, spec=None, *, concurrency: int = 1, batch_size: int | None = None, **kwargs):
    """``dataset`` with generated text added (`Generate`'s columns), by ``concurrency``
    actors, each with its own model. ``batch_size`` (default: 4 x parallel) rows go to an
    actor at a time."""
    spec = ModelSpec.of(spec)
    return _map(dataset, Generate, spec, concurrency, batch_size or 4 * spec.parallel, kwargs)


def embed(dataset, spec=None, *, concurrency: int = 1, batch_size: int = 64, **kwargs):
    """``dataset`` with an embedding column added (`Embed`), by ``concurrency`` actors."""
    return _map(dataset, Embed, spec, concurrency, batch_size, kwargs)


__all__ = ["Embed", "Generate", "embed", "generate"]
