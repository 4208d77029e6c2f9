"""A chat on top of a session: messages in, the model's turns out.

Each turn renders the whole conversation with the model's chat template, tokenizes it,
and hands it to `Session.sync_tokens`, which keeps the evaluated prefix the conversation
shares with what the session already holds; only the new turn is evaluated.
"""

from __future__ import annotations

from collections.abc import Iterator

from .session import GenerateOptions, GenerationSummary, Session


class Chat:
    def __init__(self, session: Session, system: str | None = None, tools: list | None = None, template=None):
        self.session = session
        self.template = template or session.loaded.chat_template
        self.tools = tools
        self.messages: list[dict] = []
        if system:
            self.messages.append({"role": "system", "content": system})
        self.last_reused = 0  # tokens the last turn did not re-evaluate

    def prompt_tokens(self) -> list[int]:
        """The conversation so far, rendered with a generation prompt and tokenized."""
        tok = self.session.tokenizer
        text = self.template.render(self.messages, add_generation_prompt=True, tools=self.tools)
        bos_text = tok.token_text(tok.bos_id) if tok.bos_id is not None else None
        if tok.add_bos and bos_text and text.startswith(bos_text):
            text = text[len(bos_text) :]  # the tokenizer adds BOS itself; don't double it
        return tok.encode(text, add_special=True, parse_special=True)

    def _begin(self, content: str) -> None:
        self.messages.append({"role": "user", "content": content})
        self.last_reused = self.session.sync_tokens(self.prompt_tokens())

    def send(self, content: str, options: GenerateOptions | None = None, sink=None, **kw) -> GenerationSummary:
        self._begin(content)
        summary = self.session.generate(options, sink, **kw)
        self.messages.append({"role": "assistant", "content": summary.text})
        return summary

    def save(self, path) -> None:
        """Write the chat (its session's state and its messages) to a checkpoint file."""
        from . import checkpoint

        with self.session._lock:
            checkpoint.save(self.session, path, extra={"chat": {"messages": self.messages, "tools": self.tools}})

    @classmethod
    def load(cls, session: Session, path) -> Chat:
        """A chat continued from a checkpoint written by `save`, on ``session`` (a fresh
        session of the same model and KV precision)."""
        from . import checkpoint

        extra = checkpoint.restore(session, path)
        data = extra.get("chat")
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
            raise checkpoint.CheckpointError(f"{path} is a session checkpoint, not a chat's (it has no messages)")
        chat = cls(session, tools=data.get("tools"))
        chat.messages = data["messages"]
        return chat

    def stream(self, content: str, options: GenerateOptions | None = None, **kw) -> Iterator[str]:
        self._begin(content)
        parts = []
        for chunk in self.session.stream(options, **kw):
            parts.append(chunk)
            yield chunk
        self.messages.append({"role": "assistant", "content": "".join(parts)})
