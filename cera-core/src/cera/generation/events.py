"""What a generation yields: one typed event per token, then the end.

`cera.generation.session.Session.events` is the one generation loop; `generate` (with a sink),
`stream` (text chunks), the CLI, the chat coordinator and the server are adapters over
these events.
"""

from __future__ import annotations

import attrs

from .sink import FinishReason


@attrs.frozen
class TokenEvent:
    """A generated token: its id, the text it releases (UTF-8-safe and clear of any stop
    string that might still match; may be empty while text is held back), its
    log-probability under the model (when asked for), and the most likely alternatives
    as (id, log-probability) pairs (when asked for)."""

    id: int
    text: str
    logprob: float | None = None
    top_logprobs: tuple[tuple[int, float], ...] | None = None


@attrs.define
class GenerationSummary:
    tokens: list[int]
    text: str
    finish_reason: FinishReason
    n_prompt_tokens: int  # tokens evaluated before the first sample
    prompt_seconds: float
    generate_seconds: float
    logprobs: list[float] | None = None
    drafted: int = 0  # speculative decoding: draft tokens verified
    accepted: int = 0  # ... and kept
    incomplete: bool = False  # cut short (length, cancel, context, stop string) before a grammar could end
    stop_token: int | None = None  # the token that ended it (FinishReason.STOP_TOKEN), not in `tokens`
    error: str | None = None  # why it ended with FinishReason.ERROR (e.g. non-finite logits, naming the step)

    def __repr__(self) -> str:
        # what a person printing it wants: the counts and how it ended, not every token id
        text = self.text if len(self.text) <= 60 else self.text[:57] + "..."
        extra = "".join(f", {k}={v!r}" for k, v in (("incomplete", self.incomplete), ("stop_token", self.stop_token),
                                                     ("error", self.error), ("drafted", self.drafted)) if v)  # fmt: skip
        return (
            f"GenerationSummary(finish_reason={self.finish_reason.value!r}, n_prompt_tokens={self.n_prompt_tokens}, "
            f"n_generated={self.n_generated}, text={text!r}{extra})"
        )

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def n_generated(self) -> int:
        return len(self.tokens)

    @property
    def prompt_tokens_per_second(self) -> float:
        return self.n_prompt_tokens / self.prompt_seconds if self.prompt_seconds > 0 else float("nan")

    @property
    def tokens_per_second(self) -> float:
        return self.n_generated / self.generate_seconds if self.generate_seconds > 0 else float("nan")


@attrs.frozen
class EndEvent:
    """The end of a generation: the text still held back when it ended (flushed), and the
    summary with its finish reason."""

    summary: GenerationSummary
    text: str = ""

    @property
    def finish_reason(self) -> FinishReason:
        return self.summary.finish_reason


__all__ = ["EndEvent", "GenerationSummary", "TokenEvent"]
