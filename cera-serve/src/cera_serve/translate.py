"""Other APIs over the chat completions route: a request of another API (OpenAI's Responses,
Anthropic's Messages) becomes a chat completions body, runs through the very handler that
serves /v1/chat/completions (its prompt, sampling, tools and constraints), and what it
answers (a JSON body, or its server-sent chunks) is turned back into that API's shape.

One path for generation means one behaviour: what chat completions does with tools,
grammars, stop strings and cancellation, the other APIs do the same way.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import attrs
from starlette.requests import Request


def inner_request(request: Request, body: dict) -> Request:
    """``request`` with ``body`` as its JSON body; a disconnect of the client still shows."""
    raw = json.dumps(body).encode()
    headers = [(k, v) for k, v in request.scope["headers"] if k.lower() != b"content-length"]
    headers.append((b"content-length", str(len(raw)).encode()))
    sent = False

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return await request.receive()

    return Request({**request.scope, "headers": headers}, receive)


@attrs.define
class Call:
    """A complete tool call of the reply."""

    id: str
    name: str
    arguments: str  # JSON text


@attrs.define
class Delta:
    """One piece of a streamed reply: text, reasoning, a whole call, or the end."""

    text: str = ""
    reasoning: str = ""
    call: Call | None = None
    finish: str | None = None  # chat completions' finish_reason, at the end
    stop: str | None = None  # the stop string that ended it, at the end
    usage: dict | None = None


def chat_choice(body: dict) -> tuple[dict, str, dict, str | None]:
    """(the message, finish_reason, usage, the stop string that ended it) of a chat completion."""
    choice = body["choices"][0]
    return choice["message"], choice["finish_reason"], body.get("usage") or {}, choice.get("stop_reason")


def calls_of(message: dict) -> list[Call]:
    return [Call(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or ()]


async def deltas(response) -> AsyncIterator[Delta]:
    """The chat completion chunks of a streaming response as Deltas; an error in the stream
    is raised as the APIError it reports."""
    from .app import APIError

    async for piece in response.body_iterator:
        text = piece.decode() if isinstance(piece, bytes) else piece
        for line in text.splitlines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                return
            body = json.loads(data)
            if "error" in body:
                e = body["error"]
                raise APIError(500 if e.get("type") == "server_error" else 400, e.get("message", "generation failed"),
                               e.get("type") or "server_error", code=e.get("code"))  # fmt: skip
            if body.get("usage") and not body.get("choices"):
                yield Delta(usage=body["usage"])
                continue
            for choice in body.get("choices") or ():
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    yield Delta(text=delta["content"])
                if delta.get("reasoning_content"):
                    yield Delta(reasoning=delta["reasoning_content"])
                for c in delta.get("tool_calls") or ():
                    fn = c.get("function") or {}
                    yield Delta(call=Call(c.get("id", ""), fn.get("name", ""), fn.get("arguments", "")))
                if choice.get("finish_reason"):
                    yield Delta(finish=choice["finish_reason"], stop=choice.get("stop_reason"))


def function_tools(tools, flat: bool, field: str = "tools") -> list[dict] | None:
    """Function tools in chat completions' shape, from the Responses API's flat ones
    (``{"type": "function", "name", "parameters"}``) or Anthropic's (``{"name", "input_schema"}``)."""
    from .app import APIError

    if tools is None:
        return None
    if not isinstance(tools, list):
        raise APIError(400, f"'{field}' must be a list of tools", param=field)
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            raise APIError(400, f"{field}[{i}] must be an object", param=field)
        if flat:
            if t.get("type") != "function":
                raise APIError(400, f"{field}[{i}]: only function tools are supported here, not {t.get('type')!r}",
                               param=field, code="unsupported")  # fmt: skip
            fn = {k: t[k] for k in ("name", "description", "parameters", "strict") if k in t}
        else:
            if t.get("type") not in (None, "custom"):
                raise APIError(400, f"{field}[{i}]: only client tools (name, input_schema) are supported here, not "
                                    f"{t.get('type')!r}", param=field, code="unsupported")  # fmt: skip
            fn = {"name": t.get("name"), "parameters": t.get("input_schema", {"type": "object"})}
            if "description" in t:
                fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def copy_fields(src: dict, dst: dict, names: dict) -> None:
    """``dst[new] = src[old]`` for each present field."""
    for old, new in names.items():
        if old in src and src[old] is not None:
            dst[new] = src[old]


def matched_stop(loaded, summary, stops) -> str | None:
    """The stop string that ended a generation (vLLM's ``stop_reason``), or None: the first
    of ``stops`` to appear in the text of its tokens."""
    if summary is None or summary.finish_reason.value != "stop_string" or not stops:
        return None
    text = loaded.detokenize(summary.tokens)
    hits = [(text.find(s), s) for s in stops if s and s in text]
    return min(hits)[1] if hits else None
