"""What a chat template does at the seams of a conversation, found by rendering probe
conversations through it: the generation prompt (how a reply begins), the text that closes
a reply when another message follows (how a turn ends), and whether it renders tools,
assistant tool calls and ``tool`` messages itself.

The chat coordinator needs the turn's end to evaluate only what a new message adds: the
session holds the reply as the model wrote it (no end-of-turn token: generation stops on
it), so a continuing turn is the end of the reply, then the new messages, then the next
generation prompt. A template that does not render a conversation as a growing text (one
that rewrites earlier turns when a message is added) has no such continuation and is
refused by name, rather than re-evaluating the whole conversation every turn unnoticed.
"""

from __future__ import annotations

import attrs

from ..errors import TemplateError

PROBE_USER = "cera-probe-question-one"
PROBE_REPLY = "cera-probe-answer-one"
PROBE_USER_2 = "cera-probe-question-two"
PROBE_TOOL = "cera_probe_tool"
PROBE_RESULT = "cera-probe-result"


class TemplateProfileError(TemplateError):
    """The template's turns cannot be continued message by message."""


@attrs.frozen
class TemplateProfile:
    generation_prompt: str  # what add_generation_prompt appends (a reply's header)
    turn_end: str  # text that closes a reply when another message follows
    turn_end_ids: tuple[int, ...]  # ... as tokens
    renders_tools: bool  # the template writes the tool list into the prompt
    renders_tool_calls: bool  # ... an assistant message's tool_calls
    renders_tool_role: bool  # ... messages of role "tool"


def _common_prefix(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _try(template, messages, **kw) -> str | None:
    try:
        return template.render(messages, **kw)
    except TemplateError:
        return None


def profile(template, tokenizer) -> TemplateProfile:
    """The template's profile (see the module docstring); `TemplateProfileError` when a
    reply cannot be continued by appending the next messages. Found once per template and
    tokenizer (a server asks for it on every request)."""
    cached = getattr(template, "_cera_profile", None)
    if cached is not None and cached[0] is tokenizer:
        if isinstance(cached[1], Exception):
            raise cached[1]
        return cached[1]
    try:
        found = _probe(template, tokenizer)
    except TemplateProfileError as e:
        template._cera_profile = (tokenizer, e)
        raise
    template._cera_profile = (tokenizer, found)
    return found


def _probe(template, tokenizer) -> TemplateProfile:
    label = f"the chat template{template._label()}"
    user = {"role": "user", "content": PROBE_USER}
    reply = {"role": "assistant", "content": PROBE_REPLY}
    user2 = {"role": "user", "content": PROBE_USER_2}
    opened = template.render([user], add_generation_prompt=True)
    closed = template.render([user], add_generation_prompt=False)
    # what add_generation_prompt appends; a template may also close a conversation that asks
    # for no reply (Phi-3 writes its end-of-text then), so only the shared part must agree
    if opened.startswith(closed):
        generation_prompt = opened[len(closed) :]
    else:  # where they part, at a token boundary (markers are single tokens)
        o_ids = tokenizer.encode(opened, add_special=False, parse_special=True)
        c_ids = tokenizer.encode(closed, add_special=False, parse_special=True)
        tail = o_ids[_common_prefix(o_ids, c_ids) :]
        generation_prompt = tokenizer.decode_bytes(tail, special=True).decode("utf-8", "replace")
    if not opened.endswith(generation_prompt) or PROBE_USER not in opened[: len(opened) - len(generation_prompt)]:
        raise TemplateProfileError(
            f"{label} changes the conversation when asked for a generation prompt, instead of appending one"
        )
    answered = template.render([user, reply], add_generation_prompt=False)
    continued = template.render([user, reply, user2], add_generation_prompt=True)
    head = opened + PROBE_REPLY
    for name, text in (
        ("a conversation with a reply", answered),
        ("a conversation that goes on after a reply", continued),
    ):
        if not text.startswith(head):
            raise TemplateProfileError(
                f"{label} does not render {name} as the generation prompt followed by the reply, so cera cannot "
                f"continue a conversation by evaluating only the new messages (pass allow_reevaluation=True to "
                f"re-evaluate the conversation from its first difference each turn)"
            )

    # the reply's end: the tokens the closed and the continued renders share after the reply
    def ids(text):
        return tokenizer.encode(text, add_special=False, parse_special=True)

    tail_closed, tail_next = ids(answered[len(head) :]), ids(continued[len(head) :])
    end_ids = tail_next[: _common_prefix(tail_closed, tail_next)]
    turn_end = tokenizer.decode_bytes(end_ids, special=True).decode("utf-8", "replace") if end_ids else ""
    if not continued[len(head) :].startswith(turn_end):
        raise TemplateProfileError(f"{label}: the end of a reply does not come apart at a token boundary")
    if PROBE_USER_2 not in continued[len(head) + len(turn_end) :]:
        raise TemplateProfileError(f"{label} does not render a message that follows a reply")
    tool = {
        "type": "function",
        "function": {"name": PROBE_TOOL, "description": "probe", "parameters": {"type": "object", "properties": {}}},
    }
    with_tools = _try(template, [user], add_generation_prompt=True, tools=[tool])
    call = {"id": "call_probe", "type": "function", "function": {"name": PROBE_TOOL, "arguments": {}}}
    with_call = _try(
        template, [user, {"role": "assistant", "content": "", "tool_calls": [call]}], add_generation_prompt=False
    )
    with_result = _try(
        template,
        [user, {"role": "assistant", "content": "", "tool_calls": [call]},
         {"role": "tool", "tool_call_id": "call_probe", "name": PROBE_TOOL, "content": PROBE_RESULT}],
        add_generation_prompt=True, tools=[tool],
    )  # fmt: skip
    return TemplateProfile(
        generation_prompt=generation_prompt,
        turn_end=turn_end,
        turn_end_ids=tuple(end_ids),
        renders_tools=with_tools is not None and PROBE_TOOL in with_tools,
        renders_tool_calls=with_call is not None and PROBE_TOOL in with_call,
        renders_tool_role=with_result is not None and PROBE_RESULT in with_result,
    )
