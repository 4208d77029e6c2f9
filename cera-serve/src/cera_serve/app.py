"""The OpenAI-compatible HTTP API over cera's batching scheduler.

Starlette (a small, well-kept ASGI toolkit: routing, requests, streaming responses, no
validation layer to fight for OpenAI's error shapes) served by uvicorn.

Each request for text gets a session of the model's `cera.generation.scheduler.Scheduler` (one state
slot per sequence, ``--parallel`` slots). Its generation runs in a worker thread; the
scheduler puts the decode steps of all running sequences into one forward pass, and a
sequence joins or leaves between steps. Events cross to the event loop through an asyncio
queue and go out as they come (server-sent events when streaming). A client that goes away
cancels its sequence within a step. Requests beyond the free slots wait in a bounded queue;
past it they get 429 with Retry-After instead of piling up in memory. Every sequence's
tokens are the tokens it would get alone (the scheduler's guarantee); common prompt
prefixes (system prompts) are shared through the model's prefix cache.

Errors are OpenAI's JSON error shape with the right status, never a stack trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator

import attrs
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from .metrics import Metrics
from .speculation import attach_draft, speculation_options

MAX_BODY = 8 * 2**20  # bytes of a request body
# How deeply a request body's objects and arrays may nest (schemas and tools included): room
# for any real request, and far below the depth at which a recursive parser (the schema
# compiler, the template renderer) runs out of stack.
MAX_DEPTH = 64


@attrs.define
class ServerConfig:
    model: str | None = None
    device: str = "auto"
    threads: int | None = None
    parallel: int = 4
    n_ctx: int | None = None
    api_key: str | None = None
    max_queue: int = 64
    prompt_cache: str | None = None
    model_draft: str | None = None  # a draft model for speculative decoding (cera_serve.speculation)
    device_draft: str | None = None  # its backend (default: the model's)
    draft_max: int = 16
    draft_min: int = 0
    draft_p_min: float = 0.75
    loaded: object = None  # an already loaded model (tests, embedding applications)


class APIError(Exception):
    """An error to send in OpenAI's shape."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict | None = None):  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


FINISH = {"stop": "stop", "stop_string": "stop", "length": "length", "context": "length", "grammar": "stop",
          "cancelled": "stop", "tool_calls": "tool_calls"}  # fmt: skip


class Server:
    """The loaded model, its scheduler, and the admission of requests."""

    def __init__(self, config: ServerConfig):
        self.config = config
        self.status = "loading"
        self.error: str | None = None
        self.loaded = None
        self.scheduler = None
        self.metrics = Metrics()
        self.slots: asyncio.Semaphore | None = None
        self.waiting = 0
        self.created = int(time.time())

    # -- loading -----------------------------------------------------------------------------

    def load(self) -> None:
        import cera
        from cera.sources import bundles

        try:
            loaded = self.config.loaded
            if loaded is None:
                loaded = cera.load(self.config.model or bundles.DEFAULT_MODEL, device=self.config.device,
                                   threads=self.config.threads, quiet=True)  # fmt: skip
            if self.config.model_draft is not None:
                attach_draft(loaded, self.config)
            if loaded.prefix_cache is None:
                loaded.enable_prefix_cache(directory=self.config.prompt_cache)
            self.scheduler = loaded.scheduler(n_slots=self.config.parallel, n_ctx=self.config.n_ctx)
            self.loaded = loaded
            self.status = "ready"
        except Exception as e:  # noqa: BLE001 - reported by /health and on every request
            self.error = f"{type(e).__name__}: {e}"
            self.status = "failed"

    def ready(self) -> None:
        if self.status == "loading":
            raise APIError(503, "the model is still loading; retry shortly", "server_error", code="loading",
                           headers={"Retry-After": "2"})  # fmt: skip
        if self.status == "failed":
            raise APIError(503, f"the model failed to load: {self.error}", "server_error", code="load_failed")

    @property
    def model_name(self) -> str:
        return self.config.model or (self.loaded.name if self.loaded else "cera")

    # -- admission ------------------------------------------------------------------------------

    async def slot(self):
        """Wait for a free sequence slot (bounded queue: 429 past it)."""
        if self.slots.locked() and self.waiting >= self.config.max_queue:
            self.metrics.rejected += 1
            raise APIError(429, f"the server is busy: {self.config.parallel} sequences run and {self.waiting} wait; retry later",
                           "rate_limit_error", code="busy", headers={"Retry-After": "1"})  # fmt: skip
        self.waiting += 1
        try:
            await self.slots.acquire()
        finally:
            self.waiting -= 1


# -- request parsing ------------------------------------------------------------------------------


async def read_json(request: Request) -> dict:
    size = int(request.headers.get("content-length") or 0)
    if size > MAX_BODY:
        raise APIError(413, f"the request body of {size} bytes exceeds the limit of {MAX_BODY}")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise APIError(413, f"the request body exceeds the limit of {MAX_BODY} bytes")
    try:
        data = json.loads(body or b"{}")
    except ValueError as e:
        raise APIError(400, f"the request body is not valid JSON: {e}") from None
    except RecursionError:
        raise APIError(400, f"the request body is nested more than {MAX_DEPTH} levels deep") from None
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object")
    if json_depth(data) > MAX_DEPTH:
        raise APIError(400, f"the request body is nested more than {MAX_DEPTH} levels deep")
    return data


def json_depth(value) -> int:
    """How deeply objects and arrays nest in ``value`` (a scalar is 0), without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        deepest = max(deepest, d)
        if d > MAX_DEPTH:
            return d
        todo.extend((x, d + 1) for x in v)
    return deepest


def _num(data: dict, name: str, default, kind=float, lo=None, hi=None):
    v = data.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and not isinstance(v, int)):
        raise APIError(400, f"'{name}' must be {'an integer' if kind is int else 'a number'}, got {v!r}", param=name)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise APIError(400, f"'{name}' must be in [{lo}, {hi}], got {v!r}", param=name)
    return kind(v)


def generation_options(data: dict, n_prompt: int, n_ctx: int):
    """OpenAI's sampling fields as cera's GenerateOptions (OpenAI's defaults: temperature 1,
    top_p 1, no top-k or min-p cut)."""
    from cera.errors import CeraError
    from cera.generation.options import GenerateOptions

    max_tokens = data.get("max_completion_tokens", data.get("max_tokens"))
    if max_tokens is not None:
        max_tokens = _num({"max_tokens": max_tokens}, "max_tokens", None, int, 1)
    room = n_ctx - n_prompt
    if room < 1 or (max_tokens is not None and max_tokens > room):
        need = n_prompt + (max_tokens or 1)
        raise APIError(400, f"this request needs {need} tokens ({n_prompt} of prompt + {max_tokens or 1} to generate) "
                            f"but the context holds {n_ctx}: shorten the messages or lower max_tokens",
                       code="context_length_exceeded")  # fmt: skip
    stop = data.get("stop")
    if stop is None:
        stop = ()
    elif isinstance(stop, str):
        stop = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= 4:
        stop = tuple(stop)
    else:
        raise APIError(400, "'stop' must be a string or a list of up to 4 strings", param="stop")
    top_logprobs = _num(data, "top_logprobs", 0, int, 0, 20)
    logprobs = data.get("logprobs", False)
    if not isinstance(logprobs, bool) and logprobs is not None and "prompt" not in data:
        raise APIError(400, "'logprobs' must be true or false", param="logprobs")
    if "prompt" in data and isinstance(logprobs, int) and not isinstance(logprobs, bool):  # completions: a count
        top_logprobs, logprobs = logprobs, logprobs > 0
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise APIError(400, "'seed' must be an integer", param="seed")
    ignore_eos = data.get("ignore_eos", False)  # an extension llama.cpp's server has too
    if not isinstance(ignore_eos, bool):
        raise APIError(400, "'ignore_eos' must be true or false", param="ignore_eos")
    try:
        return GenerateOptions(
            max_tokens=max_tokens if max_tokens is not None else room,
            temperature=_num(data, "temperature", 1.0, float, 0.0, 2.0),
            top_p=_num(data, "top_p", 1.0, float, 0.0, 1.0) or 1.0,
            top_k=0,
            min_p=0.0,
            presence_penalty=_num(data, "presence_penalty", 0.0, float, -2.0, 2.0),
            frequency_penalty=_num(data, "frequency_penalty", 0.0, float, -2.0, 2.0),
            seed=seed,
            stop=stop,
            logprobs=bool(logprobs),
            top_logprobs=top_logprobs,
            ignore_eos=ignore_eos,
        )
    except CeraError as e:
        raise APIError(400, str(e)) from None


def chat_prompt(loaded, data: dict):
    """The request's messages (and tools) as prompt tokens, through the model's chat
    template (`cera.chat.prompt`); returns (tokens, the ChatPrompt)."""
    from cera.chat.prompt import ChatPrompt, message
    from cera.errors import CeraError
    from cera.tools import ToolError

    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise APIError(400, "'messages' must be a non-empty list of {role, content} objects", param="messages")
    clean = []
    for i, m in enumerate(messages):
        try:
            clean.append(message(m))
        except CeraError as e:
            raise APIError(400, f"messages[{i}]: {e}", param="messages") from None
    try:
        prompt = ChatPrompt(loaded, data.get("tools"), allow_reevaluation=True)
    except ToolError as e:
        raise APIError(400, str(e), param="tools") from None
    except CeraError as e:
        raise APIError(400, f"the chat template cannot be used: {e}", param="messages") from None
    try:
        return prompt.encode(prompt.render(clean)), prompt
    except CeraError as e:
        raise APIError(400, f"the chat template cannot render these messages: {e}", param="messages") from None


def response_format(options, data: dict):
    """OpenAI's response_format as cera's constraint options: json_object (any JSON
    object), json_schema (its schema; strict or not, the output follows it)."""
    fmt = data.get("response_format")
    if fmt is None:
        return options
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return options
    if kind == "json_object":
        return attrs.evolve(options, json=True)
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise APIError(
                400,
                "response_format json_schema needs json_schema.schema, a JSON Schema object",
                param="response_format",
            )
        from cera.errors import CeraError
        from cera.grammar import Constraint

        try:
            constraint = Constraint.json_schema(schema)
            constraint.compile()  # a schema cera cannot enforce is the client's error, said now
        except CeraError as e:
            raise APIError(400, f"response_format: {e}", param="response_format") from None
        except RecursionError:  # $ref chains that nest without end
            raise APIError(400, "response_format: the schema nests too deeply", param="response_format") from None
        return attrs.evolve(options, grammar=constraint)
    raise APIError(400, "response_format.type must be 'text', 'json_object' or 'json_schema'", param="response_format")


def completion_prompt(loaded, data: dict) -> list[int]:
    prompt = data.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return loaded.tokenize(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return list(prompt)
    raise APIError(400, "'prompt' must be a string or a list of token ids (one prompt per request)", param="prompt")


# -- running a sequence ------------------------------------------------------------------------------


class Generation:
    """One sequence: a scheduler session generating in a worker thread, its events handed
    to the event loop through a queue."""

    def __init__(self, server: Server, prompt: list[int], options, processors=()):
        self.server = server
        self.prompt = prompt
        self.options = options
        self.processors = list(processors)
        self.queue: asyncio.Queue = asyncio.Queue()
        self.session = None
        self.cancelled = threading.Event()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        threading.Thread(target=self._run, args=(loop,), daemon=True).start()

    def _run(self, loop) -> None:
        put = lambda item: loop.call_soon_threadsafe(self.queue.put_nowait, item)  # noqa: E731
        session = None
        self.server.metrics.started()
        try:
            session = self.server.scheduler.new_session()
            self.session = session
            if self.cancelled.is_set():
                session.cancel()
            session.append_tokens(self.prompt)
            for event in session.events(self.options, processors=self.processors):
                put(event)
        except Exception as e:  # noqa: BLE001 - the handler turns it into an error response
            put(e)
        finally:
            if session is not None:
                session.close()
            self.server.metrics.ended()
            # the slot is free once its session is closed (not when the client stops reading)
            loop.call_soon_threadsafe(self.server.slots.release)
            put(None)

    def cancel(self) -> None:
        self.cancelled.set()
        if self.session is not None:
            self.session.cancel()

    async def events(self) -> AsyncIterator:
        while True:
            item = await self.queue.get()
            if item is None:
                return
            if isinstance(item, Exception):
                raise item
            yield item


def _error_from(e: Exception) -> APIError:
    from cera.errors import ContextFull, GrammarError, InvalidOptions, SessionError
    from cera.tools import ToolError

    if isinstance(e, APIError):
        return e
    if isinstance(e, (ToolError, GrammarError)):
        return APIError(400, str(e))
    if isinstance(e, ContextFull):
        return APIError(400, str(e), code="context_length_exceeded")
    if isinstance(e, (InvalidOptions, SessionError)):
        return APIError(400, str(e))
    return APIError(500, f"generation failed: {type(e).__name__}: {e}", "server_error")


def _logprob_entry(loaded, token: int, logprob, top) -> dict:
    piece = loaded.tokenizer.decode([token])
    entry = {"token": piece, "logprob": logprob, "bytes": list(piece.encode("utf-8", "replace"))}
    entry["top_logprobs"] = [
        {"token": (p := loaded.tokenizer.decode([t])), "logprob": lp, "bytes": list(p.encode("utf-8", "replace"))}
        for t, lp in (top or ())
    ]
    return entry


# -- routes ------------------------------------------------------------------------------------------


def create_app(config: ServerConfig) -> Starlette:
    from cera.errors import CeraError

    server = Server(config)

    def authorized(request: Request) -> None:
        if not config.api_key:
            return
        header = request.headers.get("authorization", "")
        given = header[7:] if header.lower().startswith("bearer ") else ""
        if not hmac.compare_digest(given.encode(), config.api_key.encode()):
            raise APIError(401, "a valid API key is required (Authorization: Bearer KEY)", "authentication_error",
                           code="invalid_api_key")  # fmt: skip

    def endpoint(fn, auth: bool = True, needs_model: bool = True):
        async def handler(request: Request) -> Response:
            started = time.perf_counter()
            status = 500
            try:
                if auth:
                    authorized(request)
                if needs_model:
                    server.ready()
                response = await fn(request)
                status = response.status_code
                return response
            except APIError as e:
                status = e.status
                return e.response()
            except RecursionError:  # what a request nests (schemas, tools) beyond what a parser follows
                status = 400
                return APIError(400, "the request nests too deeply to be read").response()
            except Exception as e:  # noqa: BLE001 - never a stack trace to the client
                status = 500
                return APIError(500, f"internal error: {type(e).__name__}: {e}", "server_error").response()
            finally:
                server.metrics.request(request.url.path, status, time.perf_counter() - started)

        return handler

    async def health(request: Request) -> Response:
        body = {"status": server.status}
        if server.error:
            body["error"] = server.error
        return JSONResponse(body, status_code=200 if server.status == "ready" else 503)

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": server.model_name, "object": "model", "created": server.created, "owned_by": "cera"}]})  # fmt: skip

    async def metrics(request: Request) -> Response:
        return PlainTextResponse(server.metrics.render(server), media_type="text/plain; version=0.0.4")

    async def tokenize(request: Request) -> Response:
        data = await read_json(request)
        content = data.get("content")
        if not isinstance(content, str):
            raise APIError(400, "'content' must be a string", param="content")
        add_special = data.get("add_special", True)
        return JSONResponse({"tokens": server.loaded.tokenize(content, add_special=bool(add_special))})

    async def detokenize(request: Request) -> Response:
        data = await read_json(request)
        tokens = data.get("tokens")
        n_vocab = server.loaded.model.n_vocab
        if not isinstance(tokens, list) or not all(isinstance(t, int) and 0 <= t < n_vocab for t in tokens):
            raise APIError(400, f"'tokens' must be a list of token ids in [0, {n_vocab})", param="tokens")
        return JSONResponse({"content": server.loaded.detokenize(tokens)})

    async def embeddings(request: Request) -> Response:
        from cera.errors import CeraError

        data = await read_json(request)
        inputs = data.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs or not all(isinstance(t, str) for t in inputs):
            raise APIError(400, "'input' must be a string or a non-empty list of strings", param="input")
        embed = getattr(server.loaded, "embed", None)
        if embed is None:
            raise APIError(400, "this cera has no embeddings API", code="unsupported")
        await server.slot()
        try:
            vectors = await asyncio.get_running_loop().run_in_executor(None, embed, inputs)
        except CeraError as e:
            raise APIError(400, f"this model cannot embed: {e}", code="unsupported") from None
        finally:
            server.slots.release()
        n_tokens = sum(len(server.loaded.tokenize(t)) for t in inputs)
        return JSONResponse({
            "object": "list", "model": server.model_name,
            "data": [{"object": "embedding", "index": i, "embedding": [float(x) for x in v]} for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        })  # fmt: skip

    async def completions(request: Request) -> Response:
        return await _generate(request, chat=False)

    async def chat_completions(request: Request) -> Response:
        return await _generate(request, chat=True)

    async def _generate(request: Request, chat: bool) -> Response:
        data = await read_json(request)
        loaded = server.loaded
        reader = None  # a chat's ChatPrompt: the tool format, the reply splitter
        if chat:
            prompt, reader = chat_prompt(loaded, data)
        else:
            if data.get("tools"):
                raise APIError(400, "tools are for /v1/chat/completions", param="tools")
            prompt = completion_prompt(loaded, data)
        bad = [t for t in prompt if not 0 <= t < loaded.model.n_vocab]
        if bad:
            raise APIError(400, f"token ids {bad[:5]} are outside the vocabulary", param="prompt")
        options = response_format(generation_options(data, len(prompt), server.scheduler.state.n_ctx), data)
        processors, choice = [], "none"
        if reader is not None and reader.tools:
            # calls are held to the declared tools and their schemas once one starts (lazily,
            # under "auto"); "constrain_tools": false (an extension) leaves them free
            constrain = data.get("constrain_tools", True)
            if not isinstance(constrain, bool):
                raise APIError(400, "'constrain_tools' must be true or false", param="constrain_tools")
            try:
                options, processors, choice = reader.turn(options, data.get("tool_choice"), constrain)
            except CeraError as e:
                raise APIError(400, str(e), param="tool_choice") from None
        elif data.get("tool_choice") not in (None, "none", "auto"):
            raise APIError(400, "tool_choice needs tools", param="tool_choice")
        try:
            options = speculation_options(options, data, config, loaded, processors)
        except CeraError as e:
            raise APIError(400, str(e), param="speculative.n_max") from None
        n = _num(data, "n", 1, int, 1, 8)
        stream = bool(data.get("stream", False))
        if stream and n > 1:
            raise APIError(400, "'n' > 1 with streaming is not supported; ask once per completion", param="n")
        stream_options = data.get("stream_options")
        if stream_options is None:
            stream_options = {}
        if not isinstance(stream_options, dict) or not isinstance(stream_options.get("include_usage", False), bool):
            raise APIError(400, "'stream_options' must be an object like {\"include_usage\": true}", param="stream_options")
        include_usage = stream_options.get("include_usage", False)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        loop = asyncio.get_running_loop()
        markers = reader.marker_ids() if reader is not None else {}

        def options_for(i: int):
            return options if i == 0 or options.seed is None else attrs.evolve(options, seed=options.seed + i)

        def splitter():
            return reader.splitter(calls=choice != "none") if reader is not None else None

        if stream:
            await server.slot()
            gen = Generation(server, prompt, options, processors)
            gen.start(loop)
            return StreamingResponse(
                _stream(gen, request, rid, created, chat, include_usage, len(prompt), splitter(), markers),
                media_type="text/event-stream", headers={"Cache-Control": "no-cache"},
            )  # fmt: skip

        async def one(i: int) -> dict:
            await server.slot()
            gen = Generation(server, prompt, options_for(i), processors)
            gen.start(loop)
            tokens, logprobs, text, summary = [], [], [], None
            split = splitter()
            try:
                async for ev in gen.events():
                    if hasattr(ev, "summary"):
                        summary = ev.summary
                        text.append(ev.text)
                    else:
                        tokens.append(ev.id)
                        text.append(markers.get(ev.id, ev.text))
                        if options.logprobs:
                            logprobs.append(_logprob_entry(loaded, ev.id, ev.logprob, ev.top_logprobs))
                        if await request.is_disconnected():
                            gen.cancel()
            except Exception as e:  # noqa: BLE001
                raise _error_from(e) from None
            finally:
                gen.cancel()  # a request that failed or went away: stop its sequence
            server.metrics.tokens(len(prompt), len(tokens))
            server.metrics.drafts(summary.drafted, summary.accepted)
            reason = FINISH.get(summary.finish_reason.value, "stop")
            out = {"index": i, "text": "".join(text), "finish_reason": reason, "n": len(tokens),
                   "logprobs": logprobs if options.logprobs else None,
                   "drafted": summary.drafted, "accepted": summary.accepted}  # fmt: skip
            if split is not None:
                split.feed(out["text"])
                split.finish()
                out["reply"] = split.result()
                if out["reply"].calls:
                    out["finish_reason"] = "tool_calls"
            return out

        results = await asyncio.gather(*(one(i) for i in range(n)))
        usage = {"prompt_tokens": len(prompt), "completion_tokens": sum(r["n"] for r in results)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if chat:
            choices = [
                {"index": r["index"], "message": _message(r), "finish_reason": r["finish_reason"],
                 "logprobs": {"content": r["logprobs"]} if r["logprobs"] is not None else None}
                for r in results
            ]  # fmt: skip
            obj = "chat.completion"
        else:
            choices = [
                {"index": r["index"], "text": r["text"], "finish_reason": r["finish_reason"],
                 "logprobs": _completion_logprobs(r["logprobs"])}
                for r in results
            ]  # fmt: skip
            obj = "text_completion"
        body = {"id": rid, "object": obj, "created": created, "model": server.model_name, "choices": choices,
                "usage": usage}  # fmt: skip
        if any(r["drafted"] for r in results):  # llama.cpp's server reports its drafts so too
            body["timings"] = {"draft_n": sum(r["drafted"] for r in results),
                               "draft_n_accepted": sum(r["accepted"] for r in results)}  # fmt: skip
        return JSONResponse(body)

    async def _stream(gen: Generation, request: Request, rid: str, created: int, chat: bool, include_usage: bool,
                      n_prompt: int, split=None, markers=None):  # fmt: skip
        from cera.tools import ReasoningDelta, TextDelta, ToolCallEvent, ToolCallFailed

        obj = "chat.completion.chunk" if chat else "text_completion"
        markers = markers or {}

        def chunk(delta: dict | None, text: str | None, reason: str | None, logprobs=None) -> str:
            if chat:
                choice = {"index": 0, "delta": delta or {}, "finish_reason": reason, "logprobs": logprobs}
            else:
                choice = {"index": 0, "text": text or "", "finish_reason": reason, "logprobs": logprobs}
            body = {"id": rid, "object": obj, "created": created, "model": server.model_name, "choices": [choice]}
            return f"data: {json.dumps(body)}\n\n"

        n_calls = 0

        def reply_chunks(events):
            """Chunks for what the splitter made of the text: content, reasoning, calls."""
            nonlocal n_calls
            for e in events:
                if isinstance(e, TextDelta):
                    yield chunk({"content": e.text}, e.text, None)
                elif isinstance(e, ReasoningDelta):
                    yield chunk({"reasoning_content": e.text}, None, None)
                elif isinstance(e, ToolCallEvent):
                    call = {"index": n_calls, **e.call.to_openai()}
                    n_calls += 1
                    yield chunk({"tool_calls": [call]}, None, None)
                elif isinstance(e, ToolCallFailed):  # what the model wrote stays visible, as text
                    yield chunk({"content": e.failure.raw}, e.failure.raw, None)

        n_tokens = drafted = accepted = 0
        first = time.perf_counter()
        try:
            if chat:
                yield chunk({"role": "assistant", "content": ""}, None, None)
            async for ev in gen.events():
                if hasattr(ev, "summary"):
                    if split is not None:
                        for c in reply_chunks(split.feed(ev.text) + split.finish()):
                            yield c
                    elif ev.text:
                        yield chunk({"content": ev.text}, ev.text, None)
                    reason = "tool_calls" if n_calls else FINISH.get(ev.summary.finish_reason.value, "stop")
                    yield chunk({}, "", reason)
                    drafted, accepted = ev.summary.drafted, ev.summary.accepted
                    server.metrics.drafts(drafted, accepted)
                    continue
                if n_tokens == 0:
                    server.metrics.first_token(time.perf_counter() - first)
                n_tokens += 1
                lp = None
                if gen.options.logprobs:
                    entry = _logprob_entry(server.loaded, ev.id, ev.logprob, ev.top_logprobs)
                    lp = {"content": [entry]} if chat else _completion_logprobs([entry])
                if split is not None:
                    for c in reply_chunks(split.feed(markers.get(ev.id, ev.text))):
                        yield c
                    if lp:
                        yield chunk({}, None, None, lp)
                elif ev.text or lp:
                    yield chunk({"content": ev.text}, ev.text, None, lp)
                if await request.is_disconnected():
                    gen.cancel()
            if include_usage:
                usage = {"prompt_tokens": n_prompt, "completion_tokens": n_tokens, "total_tokens": n_prompt + n_tokens}
                body = {"id": rid, "object": obj, "created": created, "model": server.model_name, "choices": [],
                        "usage": usage}  # fmt: skip
                if drafted:
                    body["timings"] = {"draft_n": drafted, "draft_n_accepted": accepted}
                yield f"data: {json.dumps(body)}\n\n"
            yield "data: [DONE]\n\n"
        except Exception as e:  # noqa: BLE001 - the stream has started: report the error in it
            err = _error_from(e)
            yield f"data: {json.dumps({'error': {'message': err.message, 'type': err.type, 'code': err.code}})}\n\n"
        finally:
            gen.cancel()  # a client that went away (or a finished stream): stop the sequence
            server.metrics.tokens(n_prompt, n_tokens)

    routes = [
        Route("/health", endpoint(health, auth=False, needs_model=False)),
        Route("/v1/models", endpoint(models, needs_model=False)),
        Route("/metrics", endpoint(metrics, needs_model=False)),
        Route("/tokenize", endpoint(tokenize), methods=["POST"]),
        Route("/detokenize", endpoint(detokenize), methods=["POST"]),
        Route("/v1/embeddings", endpoint(embeddings), methods=["POST"]),
        Route("/v1/completions", endpoint(completions), methods=["POST"]),
        Route("/v1/chat/completions", endpoint(chat_completions), methods=["POST"]),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        server.slots = asyncio.Semaphore(config.parallel)
        await asyncio.get_running_loop().run_in_executor(None, server.load)
        yield

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.server = server

    async def not_found(request, exc):
        status = getattr(exc, "status_code", 404)
        msg = "no such route" if status == 404 else "method not allowed" if status == 405 else str(exc)
        return APIError(status, f"{request.method} {request.url.path}: {msg}").response()

    app.add_exception_handler(404, not_found)
    app.add_exception_handler(405, not_found)
    return app


def _message(r: dict) -> dict:
    """A chat choice's message: the text, and the calls the reply made (OpenAI's shape). A
    call that did not parse stays in the content as the model wrote it, and is listed in
    ``tool_call_errors`` (an extension) with the reason."""
    reply = r.get("reply")
    if reply is None:
        return {"role": "assistant", "content": r["text"]}
    content = reply.content
    if reply.failures:
        content = "\n".join([content] * bool(content) + [f.raw for f in reply.failures])
    msg = {"role": "assistant", "content": content if content or not reply.calls else None}
    if reply.calls:
        msg["tool_calls"] = [c.to_openai() for c in reply.calls]
    if reply.reasoning:
        msg["reasoning_content"] = reply.reasoning
    if reply.failures:
        msg["tool_call_errors"] = [{"raw": f.raw, "reason": f.reason} for f in reply.failures]
    return msg


def _completion_logprobs(entries) -> dict | None:
    if entries is None:
        return None
    return {
        "tokens": [e["token"] for e in entries],
        "token_logprobs": [e["logprob"] for e in entries],
        "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
        "text_offset": [],
    }
