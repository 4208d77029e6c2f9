"""A chat turn renders its prompt through the template once and tokenizes it once, though
the commands measure it (does it fit the context?) before sending it."""

from __future__ import annotations

import pytest

import cera
from cera.chat.session import ChatSession
from cera.generation.options import GenerateOptions


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    loaded = cera.load(smollm2_path, device="cpu", threads=2, quiet=True)
    yield loaded
    loaded.close()


def _count(monkeypatch, conversation) -> dict:
    """Count the template's renders and the tokenizer's encodes from here on."""
    counts = {"render": 0, "encode": 0}
    template, tokenizer = conversation.prompt.template, conversation.prompt.tokenizer
    real_render, real_encode = template.render, tokenizer.encode

    def render(*a, **kw):
        counts["render"] += 1
        return real_render(*a, **kw)

    def encode(*a, **kw):
        counts["encode"] += 1
        return real_encode(*a, **kw)

    monkeypatch.setattr(template, "render", render)
    monkeypatch.setattr(tokenizer, "encode", encode)
    return counts


def test_measured_then_sent_prompt_is_rendered_and_tokenized_once(smollm2, monkeypatch):
    """As `cera run --chat` does: the prompt's length, then the reply."""
    from cera_cli.conversation import prompt_length

    session = smollm2.new_session(n_ctx=256)
    conversation = ChatSession(session, system="Be brief.")
    counts = _count(monkeypatch, conversation)
    n = prompt_length(conversation, [*conversation.messages, {"role": "user", "content": "Hi!"}])
    text = "".join(conversation.reply("Hi!", GenerateOptions(max_tokens=3, temperature=0)))
    assert counts == {"render": 1, "encode": 1}
    assert session.last_summary.n_prompt_tokens == n  # the tokens measured are the tokens evaluated
    assert text == session.last_summary.text


def test_a_chat_loop_turn_renders_and_tokenizes_its_prompt_once(smollm2, monkeypatch):
    """As `cera chat` does: make room for the message (measuring it), then send it."""
    from cera_cli.commands.chat import ChatLoop
    from cera_cli.options import Console

    session = smollm2.new_session(n_ctx=512)
    loop = ChatLoop(smollm2, session, "Be brief.", GenerateOptions(max_tokens=3, temperature=0), Console(quiet=True),
                    "f16")  # fmt: skip
    counts = _count(monkeypatch, loop.conversation)
    loop.send("Hi!")
    assert counts == {"render": 1, "encode": 1}
