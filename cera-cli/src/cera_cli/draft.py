"""The draft model of speculative decoding, for the commands that generate (run, chat,
bench): -md/--model-draft and --device-draft, and the bundle's own draft under --spec."""

from __future__ import annotations

import functools

import click


def draft_options(func):
    """-md/--model-draft and --device-draft."""

    @click.option(
        "-md", "--model-draft", "model_draft", default=None, metavar="MODEL",
        help="A smaller model of the same vocabulary that drafts tokens for the model to verify in one pass "
        "(speculative decoding: the greedy output is plain decoding's, sampling keeps the model's distribution). "
        "With --spec, a bundle that carries a draft uses it.",
    )  # fmt: skip
    @click.option("--device-draft", "device_draft", default=None, metavar="DEVICE",
                  help="Backend of the draft model (default: the model's).")  # fmt: skip
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


def bundle_draft(source) -> str | None:
    """The draft a bundle carries (its `draft_model` companion), or None."""
    from cera.errors import CeraError
    from cera.sources import bundles, resolve

    try:
        local = resolve(source or bundles.DEFAULT_MODEL, quiet=True)
    except CeraError:
        return None
    found = local.companions.get("draft_model")
    return None if found is None else str(found)


def drafting(source, model_draft, spec: bool) -> bool:
    """Whether a draft model will speculate: -md/--model-draft, or --spec on a bundle that carries one."""
    return model_draft is not None or (spec and bundle_draft(source) is not None)


def attach_draft(loaded, source, model_draft, device_draft, threads, console, spec: bool) -> bool:
    """Load and attach the draft model: -md/--model-draft, or under --spec the one the
    model's bundle carries. Returns whether one is attached."""
    import cera

    if model_draft is None and spec:
        model_draft = bundle_draft(source)
        if model_draft is not None:
            console.detail(f"cera: --spec: drafting with the bundle's draft model {model_draft}")
    if model_draft is None:
        if device_draft is not None:
            raise click.UsageError("--device-draft needs a draft model: -md/--model-draft")
        return False
    device = device_draft or loaded.backend.name
    draft = cera.load(model_draft, device=device, threads=threads, quiet=console.quiet)
    loaded.set_draft(draft)
    console.detail(f"cera: draft model {draft.path} ({draft.architecture}) on backend {draft.backend.name}")
    return True
