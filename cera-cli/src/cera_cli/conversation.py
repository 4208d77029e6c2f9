"""What the commands need of a conversation (`cera.chat.session.ChatSession`), in one place."""

from __future__ import annotations


def say(conversation, message, options):
    """Add a user message (text, or a message dict) and stream the reply's text."""
    return conversation.reply(message, options)


def messages_of(conversation) -> list[dict]:
    """A copy of the conversation's messages; give changes back with `set_messages`."""
    return [dict(m) for m in conversation.messages]


def set_messages(conversation, messages: list[dict]) -> None:
    """Take ``messages`` as the whole conversation (the session keeps what still matches)."""
    conversation.replace_history(messages)


def prompt_length(conversation, messages: list[dict]) -> int:
    """Tokens of ``messages`` rendered with a generation prompt (tools included): what a
    fresh session would evaluate for them."""
    return len(conversation.prompt.prompt_ids(messages))
