"""Anthropic's Messages API (``POST /v1/messages``) over the chat completions route
(`cera_serve.translate`): ``system``, ``messages`` of text, ``tool_use`` and ``tool_result``
blocks, client ``tools`` and ``tool_choice`` (auto, any, tool, none), ``max_tokens``,
``stop_sequences``, sampling (``temperature``, ``top_p``, ``top_k``), and streaming as the
API's events. Errors take Anthropic's shape; the key may come as ``x-api-key``.
"""

from __future__ import annotations

import json
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from .translate import Delta, calls_of, chat_choice, copy_fields, deltas, function_tools, inner_request

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}  # fmt: skip


def error_body(status: int, message: str) -> dict:
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message}}


def _api_error():
    from .app import APIError

    class AnthropicError(APIError):
        """An error in Anthropic's shape."""

        def response(self) -> JSONResponse:
            return JSONResponse(error_body(self.status, self.message), status_code=self.status, headers=self.headers)

    return AnthropicError


def as_anthropic(e) -> Exception:
    cls = _api_error()
    return cls(e.status, e.message, e.type, e.param, e.code, e.headers)


def _blocks(content, where: str) -> list[dict]:
    from .app import APIError

    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise APIError(400, f"{where} must be a string or a list of content blocks", param="messages")
    for j, b in enumerate(content):
        if not isinstance(b, dict) or not isinstance(b.get("type"), str):
            raise APIError(400, f"{where}[{j}] must be a content block with a type", param="messages")
    return content


def _result_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return "" if content is None else json.dumps(content)


def chat_body(data: dict) -> dict:
    """A Messages request as a chat completions body."""
    from .app import APIError

    messages = []
    system = data.get("system")
    if system is not None:
        blocks = _blocks(system, "system")
        messages.append({"role": "system", "content": "".join(b.get("text", "") for b in blocks if b["type"] == "text")})
    given = data.get("messages")
    if not isinstance(given, list) or not given:
        raise APIError(400, "'messages' must be a non-empty list of {role, content} objects", param="messages")
    for i, m in enumerate(given):
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise APIError(400, f"messages[{i}].role must be 'user' or 'assistant'", param="messages")
        text, calls = [], []
        for j, b in enumerate(_blocks(m.get("content"), f"messages[{i}].content")):
            kind = b["type"]
            if kind == "text":
                text.append(b.get("text", ""))
            elif kind == "tool_use" and m["role"] == "assistant":
                calls.append({"id": b.get("id"), "type": "function",
                              "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input", {}))}})  # fmt: skip
            elif kind == "tool_result" and m["role"] == "user":
                content = _result_text(b.get("content"))
                if b.get("is_error"):
                    content = f"Error: {content}"
                messages.append({"role": "tool", "tool_call_id": b.get("tool_use_id"), "content": content})
            elif kind in ("thinking", "redacted_thinking"):
                continue  # earlier reasoning is not shown to the model again, as chat templates do
            else:
                raise APIError(400, f"messages[{i}].content[{j}]: blocks of type {kind!r} are not supported in a "
                                    f"{m['role']} message", param="messages", code="unsupported")  # fmt: skip
        if m["role"] == "assistant":
            msg = {"role": "assistant", "content": "".join(text) or None}
            if calls:
                msg["tool_calls"] = calls
            messages.append(msg)
        elif text or not any(b["type"] == "tool_result" for b in _blocks(m.get("content"), "")):
            messages.append({"role": "user", "content": "".join(text)})
    max_tokens = data.get("max_tokens")
    if max_tokens is None:
        raise APIError(400, "'max_tokens' is required", param="max_tokens")
    body = {"messages": messages, "max_tokens": max_tokens, "stream": bool(data.get("stream", False))}
    copy_fields(data, body, {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "model": "model",
                             "stop_sequences": "stop"})  # fmt: skip
    tools = function_tools(data.get("tools"), flat=False)
    if tools:
        body["tools"] = tools
    choice = data.get("tool_choice")
    if choice is not None:
        kind = choice.get("type") if isinstance(choice, dict) else None
        if kind == "auto":
            body["tool_choice"] = "auto"
        elif kind == "any":
            body["tool_choice"] = "required"
        elif kind == "none":
            body["tool_choice"] = "none"
        elif kind == "tool" and isinstance(choice.get("name"), str):
            body["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
        else:
            raise APIError(400, "tool_choice must be {\"type\": \"auto\" | \"any\" | \"none\"} or "
                                "{\"type\": \"tool\", \"name\": ...}", param="tool_choice")  # fmt: skip
        if choice.get("disable_parallel_tool_use"):
            body["parallel_tool_calls"] = False
    if body["stream"]:
        body["stream_options"] = {"include_usage": True}
    return body


def stop_reason(finish: str, stop: str | None, n_calls: int) -> tuple[str, str | None]:
    if n_calls or finish == "tool_calls":
        return "tool_use", None
    if finish == "length":
        return "max_tokens", None
    if stop is not None:
        return "stop_sequence", stop
    return "end_turn", None


def _input(arguments: str):
    try:
        return json.loads(arguments or "{}")
    except ValueError:
        return {}


def route(server, chat_completions):
    """The handler of ``POST /v1/messages``."""
    from .app import APIError, read_json

    async def messages(request: Request):
        try:
            data = await read_json(request)
            body = chat_body(data)
            model = (await server.model(data)).id
            answer = await chat_completions(inner_request(request, body))
        except APIError as e:
            raise as_anthropic(e) from None
        mid = f"msg_{uuid.uuid4().hex[:24]}"
        if body["stream"]:
            return StreamingResponse(_events(mid, model, answer), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})  # fmt: skip
        message, finish, usage, stop = chat_choice(json.loads(answer.body))
        content = []
        if message.get("reasoning_content"):
            content.append({"type": "thinking", "thinking": message["reasoning_content"], "signature": ""})
        if message.get("content"):
            content.append({"type": "text", "text": message["content"]})
        calls = calls_of(message)
        content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": _input(c.arguments)} for c in calls]
        reason, sequence = stop_reason(finish, stop, len(calls))
        return JSONResponse({
            "id": mid, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": reason, "stop_sequence": sequence,
            "usage": {"input_tokens": usage.get("prompt_tokens", 0), "output_tokens": usage.get("completion_tokens", 0)},
        })  # fmt: skip

    return messages


async def _events(mid: str, model: str, answer):
    """Anthropic's streaming events from the chat completion's chunks."""
    from .app import APIError

    def event(kind: str, **fields) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n"

    yield event("message_start", message={
        "id": mid, "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": None,
        "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}})  # fmt: skip
    index = -1
    open_kind = None  # "text" or "thinking": the block streaming now
    finish, stop, usage, n_calls = "stop", None, {}, 0
    try:
        async for d in deltas(answer):
            d: Delta
            if d.usage is not None:
                usage = d.usage
            if d.finish is not None:
                finish, stop = d.finish, d.stop
            for kind, piece in (("thinking", d.reasoning), ("text", d.text)):
                if not piece:
                    continue
                if open_kind != kind:
                    if open_kind is not None:
                        yield event("content_block_stop", index=index)
                    index += 1
                    open_kind = kind
                    block = {"type": "text", "text": ""} if kind == "text" else {"type": "thinking", "thinking": ""}
                    yield event("content_block_start", index=index, content_block=block)
                delta = {"type": "text_delta", "text": piece} if kind == "text" else {"type": "thinking_delta",
                                                                                      "thinking": piece}  # fmt: skip
                yield event("content_block_delta", index=index, delta=delta)
            if d.call is not None:
                if open_kind is not None:
                    yield event("content_block_stop", index=index)
                    open_kind = None
                index += 1
                n_calls += 1
                yield event("content_block_start", index=index, content_block={
                    "type": "tool_use", "id": d.call.id, "name": d.call.name, "input": {}})  # fmt: skip
                yield event("content_block_delta", index=index,
                            delta={"type": "input_json_delta", "partial_json": d.call.arguments})  # fmt: skip
                yield event("content_block_stop", index=index)
        if open_kind is not None:
            yield event("content_block_stop", index=index)
        reason, sequence = stop_reason(finish, stop, n_calls)
        yield event("message_delta", delta={"stop_reason": reason, "stop_sequence": sequence},
                    usage={"input_tokens": usage.get("prompt_tokens", 0),
                           "output_tokens": usage.get("completion_tokens", 0)})  # fmt: skip
        yield event("message_stop")
    except APIError as e:
        yield event("error", error=error_body(e.status, e.message)["error"])
