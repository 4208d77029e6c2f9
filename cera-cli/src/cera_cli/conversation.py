"""What the commands need of a conversation (`cera.chat`), in one place: the chat API grew a
coordinator (messages go in with `ingest`, `reply` streams the answer), and the commands
work with it and with the earlier `Chat` (whose `stream` took the message)."""

from __future__ import annotations


def say(conversation, text: str, options):
    """Add a user message and stream the reply's text."""
    reply = getattr(conversation, "reply", None)
    if reply is not None:
        return reply(text, options)
    return conversation.stream(text, options)


def messages_of(conversation) -> list[dict]:
    """A copy of the conversation's messages; give changes back with `set_messages`."""
    return [dict(m) for m in conversation.messages]


def set_messages(conversation, messages: list[dict]) -> None:
    """Take ``messages`` as the whole conversation (the session keeps what still matches)."""
    conversation.messages = messages


def prompt_length(conversation, messages: list[dict]) -> int:
    """Tokens of ``messages`` rendered with a generation prompt: what a fresh session would
    evaluate for them (the tokenizer adds BOS itself, so a BOS in the rendered text goes)."""
    tok = conversation.session.tokenizer
    text = conversation.template.render(messages, add_generation_prompt=True)
    bos = tok.token_text(tok.bos_id) if tok.bos_id is not None else None
    if tok.add_bos and bos and text.startswith(bos):
        text = text[len(bos) :]
    return len(tok.encode(text, add_special=True, parse_special=True))
