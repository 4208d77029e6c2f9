"""Sinks receive generation as it happens."""

from __future__ import annotations

from enum import Enum


class FinishReason(str, Enum):
    STOP_TOKEN = "stop"  # an end-of-generation token
    STOP_STRING = "stop_string"
    LENGTH = "length"  # max tokens reached
    CONTEXT = "context"  # the context window is full
    GRAMMAR = "grammar"  # the grammar accepts nothing more
    CANCELLED = "cancelled"
    ERROR = "error"


class Sink:
    """Receives generated tokens, UTF-8-safe text deltas and the final reason.

    Subclass and override what you need; every method defaults to doing nothing.
    """

    def on_token(self, token_id: int) -> None:
        pass

    def on_text(self, text: str) -> None:
        pass

    def on_audio(self, frames) -> None:  # audio-out models
        pass

    def on_error(self, message: str) -> None:
        """Why generation is about to finish with FinishReason.ERROR."""

    def on_finish(self, reason: FinishReason) -> None:
        pass


class CollectingSink(Sink):
    """Keeps everything it receives; handy in tests and scripts."""

    def __init__(self):
        self.tokens: list[int] = []
        self.chunks: list[str] = []
        self.reason: FinishReason | None = None
        self.error: str | None = None

    def on_token(self, token_id: int) -> None:
        self.tokens.append(token_id)

    def on_text(self, text: str) -> None:
        self.chunks.append(text)

    def on_error(self, message: str) -> None:
        self.error = message

    def on_finish(self, reason: FinishReason) -> None:
        self.reason = reason

    @property
    def text(self) -> str:
        return "".join(self.chunks)
