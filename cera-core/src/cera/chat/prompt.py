"""A conversation as a prompt: messages (and tools) rendered through the model's chat
template, tokenized, and the per-turn pieces tool calling adds: the call format, the
grammar for ``tool_choice``, and the splitter that reads the reply.

`cera.chat.session.ChatSession` keeps one across a conversation; the HTTP server makes one per
request. Templates differ in what they render themselves (`cera.text.template_profile`): where
a template lists no tools, cera describes them in the system message and reads the reply
in the generic JSON format; where it has no ``tool`` role, results go in as user messages.
"""

from __future__ import annotations

import json

import attrs

from ..errors import CeraError
from ..tools import ReplySplitter, ToolCall, ToolError, call_constraint, format_for, normalize_choice, normalize_tools


class ChatError(CeraError):
    """A chat used in a way its phase does not allow, or a message it cannot take."""


ROLES = ("system", "user", "assistant", "tool", "developer")


def message(m, role: str = "user") -> dict:
    """A chat message, checked: a string is a ``role`` message; OpenAI's text content parts
    are joined, an image part becoming the marker ``<__media__>`` in the text and its
    source going to the message's ``images`` list (`cera.vision.content_parts`); an
    assistant's tool calls take the shape templates read."""
    if isinstance(m, str):
        return {"role": role, "content": m}
    if not isinstance(m, dict):
        raise ChatError(f"a message is a string or a dict with 'role' and 'content', got {type(m).__name__}")
    r = m.get("role")
    if r not in ROLES:
        raise ChatError(f"a message's role must be one of {', '.join(ROLES)}, got {r!r}")
    m = dict(m)
    content = m.get("content")
    if content is None:
        m["content"] = ""
    elif not isinstance(content, str):
        if isinstance(content, list):  # OpenAI content parts: the text parts joined, images as markers
            from ..vision.content_parts import MEDIA_MARKER, is_image_part, part_source

            texts, images = [], list(m.get("images") or [])
            for p in content:
                if is_image_part(p):
                    texts.append(MEDIA_MARKER)
                    images.append(part_source(p))
                elif isinstance(p, dict) and p.get("type") == "text":
                    texts.append(p.get("text", ""))
                else:
                    kind = p.get("type") if isinstance(p, dict) else type(p).__name__
                    raise ChatError(f"content parts of type {kind!r} are not supported (text and image parts are)")
            if not all(isinstance(t, str) for t in texts):
                raise ChatError("a text content part's 'text' must be a string")
            m["content"] = "".join(texts)
            if images:
                m["images"] = images
        else:
            raise ChatError(f"a message's content must be a string, got {type(content).__name__}")
    if r == "assistant" and m.get("tool_calls"):
        if not isinstance(m["tool_calls"], list):
            raise ChatError("an assistant message's tool_calls must be a list")
        m["tool_calls"] = [template_call(c) for c in m["tool_calls"]]
    return m


def template_call(c) -> dict:
    """A call as chat templates read it: OpenAI's shape with the arguments as an object."""
    if isinstance(c, ToolCall):
        return {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
    if not isinstance(c, dict):
        raise ChatError(f"a tool call is a dict like OpenAI's, got {type(c).__name__}")
    fn = c.get("function", c)
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ChatError("a tool call needs a function name")
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise ChatError(f"tool call {fn.get('name')!r}: arguments are not JSON: {e.msg}") from None
    return {"id": c.get("id") or "", "type": "function", "function": {"name": fn["name"], "arguments": args}}


class BanTokens:
    """A sampling processor that rules tokens out (tool_choice "none": no call marker)."""

    def __init__(self, ids):
        self.ids = list(ids)

    def apply(self, c, history) -> None:
        import numpy as np

        if c.full:
            c.logits[self.ids] = -np.inf
        else:
            keep = ~np.isin(c.ids, self.ids)
            c.ids, c.values = c.ids[keep], c.values[keep]

    def accept(self, token: int) -> None:
        pass

    def finished(self) -> bool:
        return False

    def incomplete(self) -> bool:
        return False


class ChatPrompt:
    """Renders conversations of one model (and tool set) into prompts; see the module
    docstring. ``allow_reevaluation``: accept a template whose turns cannot be continued
    message by message (`profile` is then None)."""

    def __init__(self, loaded, tools=None, *, template=None, tool_format=None, allow_reevaluation: bool = False):
        from ..text.template_profile import TemplateProfileError, profile

        self.loaded = loaded
        self.tokenizer = loaded.tokenizer
        self.template = template or loaded.chat_template
        try:
            self.profile = profile(self.template, self.tokenizer)
        except TemplateProfileError:
            if not allow_reevaluation:
                raise
            self.profile = None
        if tool_format is None:
            tool_format = format_for(loaded) if template is None else format_for(
                architecture=loaded.architecture, template=self.template.source
            )  # fmt: skip
        elif isinstance(tool_format, str):
            from ..tools import by_name

            tool_format = by_name(tool_format)
        if self.profile is not None and not self.profile.renders_tools and tool_format.name != "generic":
            from ..tools import Generic

            tool_format = Generic()  # cera describes the tools itself, so the model answers in its form
        self.tool_format = tool_format
        self.tools = normalize_tools(tools)
        self._last_render: tuple[str, str] | None = None  # (what was rendered, the text)
        self._last_encode: tuple[str, tuple[int, ...]] | None = None  # (text, its tokens)
        self._images: dict[str, list] = {}  # rendered text -> the image sources its markers stand for
        self.allow_image_files = True  # images from local paths (the server allows them only when told)

    # -- rendering ---------------------------------------------------------------------------

    def view(self, messages: list[dict]) -> tuple[list[dict], list | None]:
        """The messages and tools as this template can render them (see the module docstring)."""
        p, tools = self.profile, self.tools
        out = [dict(m) for m in messages]
        if p is not None and not p.renders_tool_role:
            for i, m in enumerate(out):
                if m["role"] == "tool":
                    name = m.get("name", "the tool")
                    out[i] = {
                        "role": "user",
                        "content": f"[result of {name} ({m.get('tool_call_id', '')})]\n{m['content']}",
                    }
        if not tools:
            return out, None
        if p is None or p.renders_tools:
            return out, [t.to_openai() for t in tools]
        text = self.tool_format.system_prompt(tools)
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{text}"}
        else:
            out.insert(0, {"role": "system", "content": text})
        return out, None

    # A caller that measures a prompt (the CLI checks it fits the context) and then sends it
    # asks for the same render and the same tokens twice: the last of each is kept, so a
    # prompt is rendered and tokenized once.

    def render(self, messages, add_generation_prompt: bool = True) -> str:
        view, tools = self.view(messages)
        images = [src for m in view for src in (m.get("images") or ())]
        if images:  # the template sees the markers; the sources stay with the rendered text
            view = [{k: v for k, v in m.items() if k != "images"} for m in view]
        key = json.dumps([view, tools, add_generation_prompt], sort_keys=True, default=repr)
        last = self._last_render
        if last is not None and last[0] == key:
            text = last[1]
        else:
            text = self.template.render(view, add_generation_prompt=add_generation_prompt, tools=tools)
            self._last_render = (key, text)
        if images:
            self._images[text] = images
            while len(self._images) > 4:  # the latest renders (a chat renders a turn two ways)
                del self._images[next(iter(self._images))]
        return text

    def encode(self, text: str) -> list[int]:
        """A whole rendered prompt as tokens (BOS once: the tokenizer adds it where the
        vocabulary asks, so a BOS the template wrote goes)."""
        images = self._images.get(text)
        if images:
            return self._encode_with_images(text, images)
        last = self._last_encode
        if last is not None and last[0] == text:
            return list(last[1])
        tok = self.tokenizer
        bos_text = tok.token_text(tok.bos_id) if tok.bos_id is not None else None
        body = text[len(bos_text) :] if tok.add_bos and bos_text and text.startswith(bos_text) else text
        ids = tok.encode(body, add_special=True, parse_special=True)
        self._last_encode = (text, tuple(ids))
        return ids

    def _encode_with_images(self, text: str, images: list) -> list[int]:
        """A rendered prompt whose ``<__media__>`` markers stand for ``images``: the text
        between them tokenized piece by piece, each image as the projector places it
        (its opening text, its rows, its closing text), as libmtmd tokenizes a prompt."""
        from ..vision.content_parts import MEDIA_MARKER, readable
        from ..vision.image_tokens import ids_for

        pieces = text.split(MEDIA_MARKER)
        if len(pieces) - 1 != len(images):
            raise ChatError(
                f"the rendered prompt has {len(pieces) - 1} image markers ({MEDIA_MARKER}) for {len(images)} images; "
                f"a message's text must not contain {MEDIA_MARKER} itself"
            )
        projector = getattr(self.loaded, "projector", None)
        if projector is None:
            from ..errors import UnsupportedOperation

            raise UnsupportedOperation(
                f"{self.loaded.path.name} has no multimodal projector, so it takes no images: load its mmproj file "
                f"with it (cera.load(..., mmproj=FILE), --mmproj FILE)"
            )
        tok = self.tokenizer
        ids = self.encode(pieces[0]) if pieces[0] else ([tok.bos_id] if tok.add_bos and tok.bos_id is not None else [])
        for n, (src, piece) in enumerate(zip(images, pieces[1:], strict=True)):
            emb = projector.encode(readable(src, self.allow_image_files), f"image {n + 1}")
            for part in (emb.before, None, emb.after, piece):
                if part is None:
                    ids += ids_for(emb)
                elif part:
                    ids += tok.encode(part, add_special=False, parse_special=True)
        return ids

    def prompt_ids(self, messages) -> list[int]:
        return self.encode(self.render([message(m) for m in messages]))

    # -- a turn ----------------------------------------------------------------------------------

    def turn(self, options, tool_choice="auto", constrain_tools: bool = False):
        """``options`` with the grammar ``tool_choice`` asks for, the extra sampling
        processors, and the choice as read (see `cera.tools.call_constraint`)."""
        choice = normalize_choice(tool_choice, self.tools)
        constraint = call_constraint(self.tool_format, self.tools, choice, self.tokenizer, constrain_tools)
        processors = []
        if constraint is not None:
            if options.constrained:
                raise ToolError(
                    "tool calls are constrained by their own grammar; give no other grammar or schema with them"
                )
            options = attrs.evolve(options, grammar=constraint)
        if choice == "none" and self.tools:
            from ..tools.base import special_token_id

            tid = special_token_id(self.tool_format.start, self.tokenizer)
            if tid is not None:
                processors.append(BanTokens([tid]))
        return options, processors, choice

    def splitter(self, calls: bool = True) -> ReplySplitter:
        """A splitter for one reply (calls read only when there are tools and ``calls``)."""
        return ReplySplitter(self.tool_format, self.tools, calls=calls and bool(self.tools))

    def marker_ids(self) -> dict[int, str]:
        """Marker tokens whose text detokenizing drops (control tokens), to put back."""
        return self.tool_format.marker_ids(self.tokenizer) if self.tools else {}
