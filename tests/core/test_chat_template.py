"""Chat templates: parity with transformers' rendering, the fallback, helpers, and the sandbox.

References (data/tokenizer/chat_template_reference.json, made by make_template_reference.py):
transformers' own chat-template code rendering the templates of SmolLM2 and Qwen2.5-Coder,
and llama.cpp's built-in ChatML formatter for the fallback used with Gemma 3 270M (a base
model without a template).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from cera.text.chat_template import CHATML_FALLBACK, ChatTemplate
from cera.errors import CeraError, TemplateError
from cera.formats.gguf import GGUFFile

DATA = Path(__file__).parent / "data" / "tokenizer"
REF = json.loads((DATA / "chat_template_reference.json").read_text())
CONVERSATIONS = REF["conversations"]


class FakeGGUF:
    def __init__(self, metadata: dict, path: str = "fake.gguf"):
        self.metadata = metadata
        self.path = path


def _renders(tmpl: ChatTemplate):
    for key in REF["transformers"]["smollm2"]["renders"]:
        conv, agp = key.split("/")
        spec = CONVERSATIONS[conv]
        yield key, tmpl.render(spec["messages"], add_generation_prompt=bool(int(agp)), tools=spec["tools"])


@pytest.mark.parametrize("key,fixture", [("smollm2", "smollm2_path"), ("qwen05", "qwen05_path")])
def test_renders_equal_transformers(request, key, fixture):
    tmpl = ChatTemplate.from_gguf(GGUFFile(request.getfixturevalue(fixture)))
    ref = REF["transformers"][key]
    assert not tmpl.is_fallback
    assert tmpl.special_tokens == ref["special_tokens"]
    for k, rendered in _renders(tmpl):
        assert rendered == ref["renders"][k], k


def test_qwen_tool_prompt_content(qwen05_path):
    """A spot check of what the parity above covers: tools appear as plain-UTF-8 JSON."""
    tmpl = ChatTemplate.from_gguf(GGUFFile(qwen05_path))
    spec = CONVERSATIONS["tools_multi_turn"]
    text = tmpl.render(spec["messages"], tools=spec["tools"])
    assert '"description": "Current weather for a city, in °C — with “quotes” & <tags>."' in text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}\n</tool_call>' in text
    assert text.endswith("<|im_start|>assistant\n")


def test_gemma3_base_uses_documented_chatml_fallback(gemma3_path):
    gguf = GGUFFile(gemma3_path)
    assert "tokenizer.chat_template" not in gguf.metadata
    tmpl = ChatTemplate.from_gguf(gguf)
    assert tmpl.is_fallback and tmpl.source == CHATML_FALLBACK
    assert tmpl.special_tokens["bos_token"] == "<bos>" and tmpl.special_tokens["eos_token"] == "<eos>"
    for key, expected in REF["llama_cpp_chatml"].items():
        conv, agp = key.split("/")
        assert tmpl.render(CONVERSATIONS[conv]["messages"], add_generation_prompt=bool(int(agp))) == expected


def test_fallback_prefers_tool_use_variant():
    meta = {"tokenizer.chat_template.tool_use": "{{ 'TOOLS:' + messages[0].content }}"}
    tmpl = ChatTemplate.from_gguf(FakeGGUF(meta))
    assert not tmpl.is_fallback and tmpl.name == "tool_use"
    assert tmpl.render([{"role": "user", "content": "x"}]) == "TOOLS:x"


def test_named_templates():
    meta = {
        "tokenizer.chat_template": "{{ 'default' }}",
        "tokenizer.chat_template.rag": "{{ 'rag:' + documents[0].text }}",
        "tokenizer.chat_templates": ["rag"],
    }
    assert ChatTemplate.from_gguf(FakeGGUF(meta)).render([]) == "default"
    rag = ChatTemplate.from_gguf(FakeGGUF(meta), name="rag")
    assert rag.render([], documents=[{"title": "t", "text": "doc"}]) == "rag:doc"
    with pytest.raises(TemplateError, match="no chat template named 'nope'.*'rag'"):
        ChatTemplate.from_gguf(FakeGGUF(meta), name="nope")


def test_command_r_named_variants(llama_vocab_dir):
    gguf = GGUFFile(llama_vocab_dir / "ggml-vocab-command-r.gguf")
    tool_use = ChatTemplate.from_gguf(gguf, name="tool_use")
    assert tool_use.source == gguf.metadata["tokenizer.chat_template.tool_use"]
    out = ChatTemplate.from_gguf(gguf).render([{"role": "user", "content": "Hi"}])
    assert out.startswith("<BOS_TOKEN>") and "Hi" in out


# -- helpers real templates use ----------------------------------------------------------


def render(src: str, messages=None, **kw) -> str:
    return ChatTemplate(src, bos_token="<s>", eos_token="</s>").render(messages or [], **kw)


def test_tojson_like_transformers():
    value = {"z": "é “x” <b>&", "a": [1, 2.5, None, True]}
    assert render("{{ v | tojson }}", v=value) == json.dumps(value, ensure_ascii=False)
    assert render("{{ v | tojson(indent=2) }}", v=value) == json.dumps(value, ensure_ascii=False, indent=2)


def test_raise_exception_is_a_template_error():
    src = "{% if messages[0].role != 'user' %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}"
    with pytest.raises(TemplateError, match="Conversation roles must alternate"):
        render(src, [{"role": "assistant", "content": "x"}])
    assert issubclass(TemplateError, CeraError)


def test_strftime_now_and_specials():
    year = str(datetime.now().year)
    assert render("{{ bos_token }}{{ strftime_now('%Y') }}{{ eos_token }}") in (f"<s>{year}</s>", f"<s>{int(year) + 1}</s>")


def test_trim_blocks_loop_controls_generation_blocks_and_namespace():
    src = (
        "{% set ns = namespace(n=0) %}\n"
        "{% for m in messages %}\n"
        "{% if m.role == 'stop' %}{% break %}{% endif %}\n"
        "{% if m.role == 'skip' %}{% continue %}{% endif %}\n"
        "{% set ns.n = ns.n + 1 %}\n"
        "{% generation %}[{{ m.content }}]{% endgeneration %}\n"
        "{% endfor %}\n"
        "{{ ns.n }}{% if add_generation_prompt %}>{% endif %}"
    )
    msgs = [{"role": "a", "content": "1"}, {"role": "skip", "content": "2"}, {"role": "b", "content": "3"},
            {"role": "stop", "content": "4"}, {"role": "c", "content": "5"}]
    assert render(src, msgs) == "[1][3]2>"
    assert render(src, msgs, add_generation_prompt=False) == "[1][3]2"


def test_content_parts_and_tools_are_passed_through():
    src = (
        "{% for m in messages %}{% if m.content is string %}{{ m.content }}"
        "{% else %}{% for p in m.content %}{% if p.type == 'text' %}{{ p.text }}{% else %}<{{ p.type }}>{% endif %}"
        "{% endfor %}{% endif %}{% endfor %}|{{ tools | length if tools else 'none' }}"
    )
    msgs = [{"role": "user", "content": [{"type": "text", "text": "look: "}, {"type": "image"}]}]
    assert render(src, msgs) == "look: <image>|none"
    assert render(src, msgs, tools=[{"type": "function", "function": {"name": "f"}}]) == "look: <image>|1"


def test_messages_are_copied_not_shared():
    msgs = [{"role": "user", "content": "x"}]
    render("{% set _ = messages[0].update({'content': 'y'}) if false %}{{ messages[0].content }}", msgs)
    assert msgs == [{"role": "user", "content": "x"}]


@pytest.mark.parametrize(
    "bad, match",
    [
        ("not a list", "list"),
        ([{"role": "user", "content": object()}], "JSON-like"),
        (["just a string"], "not a dict"),
    ],
)
def test_bad_messages(bad, match):
    with pytest.raises(TemplateError, match=match):
        ChatTemplate("{{ messages }}").render(bad)


def test_syntax_error_names_the_line():
    with pytest.raises(TemplateError, match="line 2"):
        ChatTemplate("ok\n{% if %}")


# -- the sandbox -------------------------------------------------------------------------

PAYLOADS = [
    # CVE-2024-34359 (llama-cpp-python rendered GGUF templates outside a sandbox)
    "{% for x in ().__class__.__base__.__subclasses__() %}{% if \"warning\" in x.__name__ %}"
    "{{ x()._module.__builtins__['__import__']('os').popen('touch CANARY') }}{% endif %}{% endfor %}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ ''.__class__ }}",
    "{{ messages.__class__ }}",
    "{{ (1).__class__.__base__ }}",
    "{{ self.__init__.__globals__.__builtins__.__import__('os').system('touch CANARY') }}",
    "{{ cycler.__init__.__globals__.os.popen('touch CANARY').read() }}",
    "{{ joiner.__init__.__globals__.os.popen('touch CANARY') }}",
    "{{ lipsum.__globals__['os'].popen('touch CANARY') }}",
    "{{ raise_exception.__globals__['__builtins__']['__import__']('os').system('touch CANARY') }}",
    "{{ strftime_now.__globals__ }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ dict.__call__.__globals__ }}",
    "{{ ''|attr('__class__')|attr('__mro__') }}",
    "{{ (messages|attr('__class__')) }}",
    "{{ '{0.__class__.__mro__}'.format(1) }}",
    "{{ messages.pop() }}",
    "{{ {}.update(x=1) }}",
    "{% set ns = namespace(__init__=1) %}",
    "{% import 'os' as os %}{{ os.system('touch CANARY') }}",
    "{% include 'CANARY' %}",
    "{% include '/etc/passwd' %}",
    "{% extends 'base.html' %}",
    "{% from 'subprocess' import call %}",
    "{{ 'A' * 100000000 }}",
    "{{ [0] * 10000000 }}",
    "{{ 9 ** 999999999 }}",
    "{{ range(10000000000) | list }}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_template_injection_is_refused(tmp_path, payload):
    canary = tmp_path / "pwned"
    src = payload.replace("CANARY", str(canary))
    with pytest.raises(TemplateError):
        ChatTemplate(src).render([{"role": "user", "content": "hi"}])
    assert not canary.exists()


def test_injection_through_gguf_metadata_is_refused(tmp_path):
    canary = tmp_path / "pwned"
    meta = {"tokenizer.chat_template": PAYLOADS[0].replace("CANARY", str(canary))}
    tmpl = ChatTemplate.from_gguf(FakeGGUF(meta))
    with pytest.raises(TemplateError, match="sandbox forbids"):
        tmpl.render([{"role": "user", "content": "hi"}])
    assert not canary.exists()
