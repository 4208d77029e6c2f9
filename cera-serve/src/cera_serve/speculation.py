"""Speculative decoding with a draft model in the server.

`cera serve -md DRAFT` loads the draft beside the model and attaches it
(`cera.engine.LoadedModel.set_draft`): every request then drafts with it by default and
verifies the draft in one pass (`cera.generation.draft_model`). The draft runs on a
scheduler of its own with a slot per sequence (`Scheduler.draft_scheduler`); a sequence's
tokens are those it gets alone, and under greedy decoding those of plain decoding.

A request may set llama.cpp's server fields ``speculative.n_max`` (0: no drafting for this
request), ``speculative.n_min`` and ``speculative.p_min``. A request that asks for
log-probabilities, a response format or constrained tool calls decodes plainly (the draft
cannot serve those), unless it sets ``speculative.n_max`` above 0 itself, which is then
refused with a 400 that says why.
"""

from __future__ import annotations

import attrs

FIELDS = {"speculative.n_max": ("draft_max", int, 0, 256), "speculative.n_min": ("draft_min", int, 0, 256),
          "speculative.p_min": ("draft_p_min", float, 0.0, 1.0)}  # fmt: skip


def attach_draft(loaded, config) -> None:
    """Load ``config.model_draft`` and attach it to ``loaded`` (IncompatibleDraft when its
    vocabulary is not the model's)."""
    import cera

    device = config.device_draft or loaded.backend.name
    draft = cera.load(config.model_draft, device=device, threads=config.threads, quiet=True)
    loaded.set_draft(draft)


def speculation_options(options, data: dict, config, loaded, processors=()):
    """``options`` with the request's speculation settings (the server's by default).
    Raises InvalidOptions for a value out of range, or drafting asked for where it cannot
    serve."""
    from cera.errors import InvalidOptions

    values = {"draft_max": config.draft_max, "draft_min": config.draft_min, "draft_p_min": config.draft_p_min}
    for key, (name, kind, lo, hi) in FIELDS.items():
        v = data.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and not isinstance(v, int)):
            raise InvalidOptions(f"'{key}' must be {'an integer' if kind is int else 'a number'}, got {v!r}")
        if not lo <= v <= hi:
            raise InvalidOptions(f"'{key}' must be in [{lo}, {hi}], got {v!r}")
        values[name] = kind(v)
    asked = data.get("speculative.n_max") is not None and values["draft_max"] > 0
    if loaded.draft is None:
        if asked:
            raise InvalidOptions("'speculative.n_max': this server has no draft model; start it with -md/--model-draft")
        return options
    if values["draft_max"] > 0 and (options.wants_logprobs or options.constrained or processors):
        if asked:
            raise InvalidOptions(
                "'speculative.n_max': drafting cannot serve log-probabilities, response formats or constrained "
                "tool calls; leave it out (such a request decodes plainly) or set it to 0"
            )
        values["draft_max"] = 0
    if 0 < values["draft_max"] < values["draft_min"]:
        raise InvalidOptions(
            f"'speculative.n_min' ({values['draft_min']}) must not exceed 'speculative.n_max' ({values['draft_max']})"
        )
    return attrs.evolve(options, **values)


__all__ = ["FIELDS", "attach_draft", "speculation_options"]
