"""OpenAI's Responses API (``POST /v1/responses``) over the chat completions route
(`cera_serve.translate`): ``input`` (a string or items: messages, function calls and their
outputs), ``instructions``, function ``tools`` and ``tool_choice``, ``text.format`` (JSON
schemas), ``max_output_tokens``, sampling, and streaming as the API's typed events.

Responses are not stored: ``previous_response_id`` is refused (send the conversation in
``input``), and ``store`` has no effect.
"""

from __future__ import annotations

import json
import time
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from .translate import Delta, calls_of, chat_choice, copy_fields, deltas, function_tools, inner_request


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def chat_body(data: dict) -> dict:
    """A Responses request as a chat completions body."""
    from .app import APIError

    if data.get("previous_response_id") is not None:
        raise APIError(400, "responses are not stored here: send the whole conversation in 'input' instead of "
                            "'previous_response_id'", param="previous_response_id", code="unsupported")  # fmt: skip
    messages = []
    instructions = data.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise APIError(400, "'instructions' must be a string", param="instructions")
        messages.append({"role": "system", "content": instructions})
    items = data.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise APIError(400, "'input' must be a string or a non-empty list of items", param="input")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise APIError(400, f"input[{i}] must be an object", param="input")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise APIError(400, f"input[{i}].role must be user, assistant, system or developer", param="input")
            messages.append({"role": "system" if role == "developer" else role,
                             "content": _text(item.get("content"), f"input[{i}].content")})  # fmt: skip
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments", "{}")}}  # fmt: skip
            last = messages[-1] if messages else None
            if last and last["role"] == "assistant" and last.get("tool_calls") and not last.get("content"):
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": output if isinstance(output, str) else json.dumps(output)})  # fmt: skip
        elif kind == "reasoning":
            continue  # earlier reasoning is not shown to the model again, as chat templates do
        else:
            raise APIError(400, f"input[{i}]: items of type {kind!r} are not supported", param="input",
                           code="unsupported")  # fmt: skip
    body = {"messages": messages, "stream": bool(data.get("stream", False))}
    copy_fields(data, body, {"max_output_tokens": "max_tokens", "temperature": "temperature", "top_p": "top_p",
                             "parallel_tool_calls": "parallel_tool_calls", "model": "model", "seed": "seed",
                             "top_k": "top_k", "stop": "stop"})  # fmt: skip
    tools = function_tools(data.get("tools"), flat=True)
    if tools:
        body["tools"] = tools
    choice = data.get("tool_choice")
    if isinstance(choice, dict):
        if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
            raise APIError(400, "tool_choice must be 'auto', 'none', 'required' or {\"type\": \"function\", \"name\": ...}",
                           param="tool_choice")  # fmt: skip
        choice = {"type": "function", "function": {"name": choice["name"]}}
    if choice is not None:
        body["tool_choice"] = choice
    fmt = (data.get("text") or {}).get("format") if isinstance(data.get("text"), dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": fmt.get("name", "output"), "schema": fmt.get("schema"), "strict": fmt.get("strict", False)}}  # fmt: skip
    elif isinstance(fmt, dict) and fmt.get("type") in ("json_object", "text"):
        body["response_format"] = {"type": fmt["type"]}
    elif fmt is not None:
        raise APIError(400, "text.format.type must be 'text', 'json_object' or 'json_schema'", param="text")
    if body["stream"]:
        body["stream_options"] = {"include_usage": True}
    return body


def _text(content, where: str) -> str:
    from .app import APIError

    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict) and p.get("type") in ("input_text", "output_text", "text") and isinstance(p.get("text"), str):
                parts.append(p["text"])
            else:
                kind = p.get("type") if isinstance(p, dict) else type(p).__name__
                raise APIError(400, f"{where}: parts of type {kind!r} are not supported (text only)", param="input",
                               code="unsupported")  # fmt: skip
        return "".join(parts)
    raise APIError(400, f"{where} must be a string or a list of text parts", param="input")


def _usage(usage: dict) -> dict:
    n_in, n_out = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    return {"input_tokens": n_in, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": n_out,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": n_in + n_out}  # fmt: skip


def _message_item(mid: str, text: str, status: str = "completed") -> dict:
    return {"type": "message", "id": mid, "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []}  # fmt: skip


def _call_item(call, status: str = "completed") -> dict:
    return {"type": "function_call", "id": _id("fc"), "call_id": call.id, "name": call.name,
            "arguments": call.arguments if status == "completed" else "", "status": status}  # fmt: skip


def _reasoning_item(rid: str, text: str) -> dict:
    return {"type": "reasoning", "id": rid, "summary": [], "content": [{"type": "reasoning_text", "text": text}]}


class Envelope:
    """The response object around the output, as the API returns it."""

    def __init__(self, data: dict, model: str):
        self.body = {
            "id": _id("resp"), "object": "response", "created_at": int(time.time()), "status": "in_progress",
            "error": None, "incomplete_details": None, "instructions": data.get("instructions"),
            "max_output_tokens": data.get("max_output_tokens"), "model": model, "output": [],
            "parallel_tool_calls": data.get("parallel_tool_calls", True), "previous_response_id": None,
            "temperature": data.get("temperature", 1.0), "top_p": data.get("top_p", 1.0),
            "tool_choice": data.get("tool_choice", "auto"), "tools": data.get("tools") or [],
            "text": data.get("text") or {"format": {"type": "text"}}, "truncation": "disabled",
            "metadata": data.get("metadata") or {}, "store": False, "usage": None,
        }  # fmt: skip

    def finish(self, output: list, finish: str, usage: dict) -> dict:
        self.body["output"] = output
        self.body["usage"] = _usage(usage)
        if finish == "length":
            self.body["status"] = "incomplete"
            self.body["incomplete_details"] = {"reason": "max_output_tokens"}
        else:
            self.body["status"] = "completed"
        return self.body


def route(server, chat_completions):
    """The handler of ``POST /v1/responses``."""
    from .app import read_json

    async def responses(request: Request):
        data = await read_json(request)
        body = chat_body(data)
        model = (await server.model(data)).id
        env = Envelope(data, model)
        answer = await chat_completions(inner_request(request, body))
        if not body["stream"]:
            message, finish, usage, _ = chat_choice(json.loads(answer.body))
            output = []
            if message.get("reasoning_content"):
                output.append(_reasoning_item(_id("rs"), message["reasoning_content"]))
            if message.get("content"):
                output.append(_message_item(_id("msg"), message["content"]))
            output += [_call_item(c) for c in calls_of(message)]
            return JSONResponse(env.finish(output, finish, usage))
        return StreamingResponse(_events(env, answer), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})  # fmt: skip

    return responses


async def _events(env: Envelope, answer):
    """The Responses API's streaming events from the chat completion's chunks."""
    from .app import APIError

    seq = 0

    def event(kind: str, **fields) -> str:
        nonlocal seq
        body = {"type": kind, "sequence_number": seq, **fields}
        seq += 1
        return f"event: {kind}\ndata: {json.dumps(body)}\n\n"

    yield event("response.created", response=env.body)
    yield event("response.in_progress", response=env.body)
    output: list[dict] = []
    open_item: dict | None = None  # the message or reasoning item text is streaming into
    text = ""
    finish, usage = "stop", {}

    def close():
        nonlocal open_item, text
        if open_item is None:
            return
        i = len(output)
        if open_item["type"] == "message":
            part = {"type": "output_text", "text": text, "annotations": []}
            yield event("response.output_text.done", item_id=open_item["id"], output_index=i, content_index=0,
                        text=text, logprobs=[])  # fmt: skip
            yield event("response.content_part.done", item_id=open_item["id"], output_index=i, content_index=0,
                        part=part)  # fmt: skip
            item = _message_item(open_item["id"], text)
        else:
            yield event("response.reasoning_text.done", item_id=open_item["id"], output_index=i, content_index=0,
                        text=text)  # fmt: skip
            item = _reasoning_item(open_item["id"], text)
        yield event("response.output_item.done", output_index=i, item=item)
        output.append(item)
        open_item, text = None, ""

    def opened(kind: str):
        nonlocal open_item
        i = len(output)
        if kind == "message":
            open_item = _message_item(_id("msg"), "", status="in_progress")
            yield event("response.output_item.added", output_index=i, item=open_item)
            yield event("response.content_part.added", item_id=open_item["id"], output_index=i, content_index=0,
                        part={"type": "output_text", "text": "", "annotations": []})  # fmt: skip
        else:
            open_item = {"type": "reasoning", "id": _id("rs"), "summary": [], "content": []}
            yield event("response.output_item.added", output_index=i, item=open_item)

    try:
        async for d in deltas(answer):
            d: Delta
            if d.usage is not None:
                usage = d.usage
            if d.finish is not None:
                finish = d.finish
            for kind, piece in (("reasoning", d.reasoning), ("message", d.text)):
                if not piece:
                    continue
                if open_item is not None and open_item["type"] != kind:
                    for e in close():
                        yield e
                if open_item is None:
                    for e in opened(kind):
                        yield e
                text += piece
                name = "response.output_text.delta" if kind == "message" else "response.reasoning_text.delta"
                extra = {"logprobs": []} if kind == "message" else {}
                yield event(name, item_id=open_item["id"], output_index=len(output), content_index=0, delta=piece,
                            **extra)  # fmt: skip
            if d.call is not None:
                for e in close():
                    yield e
                i = len(output)
                item = _call_item(d.call, status="in_progress")
                yield event("response.output_item.added", output_index=i, item=item)
                yield event("response.function_call_arguments.delta", item_id=item["id"], output_index=i,
                            delta=d.call.arguments)  # fmt: skip
                yield event("response.function_call_arguments.done", item_id=item["id"], output_index=i,
                            arguments=d.call.arguments, name=d.call.name)  # fmt: skip
                item = {**item, "arguments": d.call.arguments, "status": "completed"}
                yield event("response.output_item.done", output_index=i, item=item)
                output.append(item)
        for e in close():
            yield e
        body = env.finish(output, finish, usage)
        yield event("response.incomplete" if body["status"] == "incomplete" else "response.completed", response=body)
    except APIError as e:
        env.body["status"] = "failed"
        env.body["error"] = {"code": e.code or e.type, "message": e.message}
        yield event("response.failed", response=env.body)
