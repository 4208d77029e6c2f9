"""Record reference renderings of the test models' chat templates, for cera's tests.

Writes `chat_template_reference.json` beside this script.

- With transformers installed (in a separate virtual environment; it is not one of
  cera's dependencies): each model's `tokenizer.chat_template`, read from the GGUF file
  with the `gguf` package, rendered by transformers' own chat-template code
  (`transformers.utils.chat_template_utils.render_jinja_template`, what
  `apply_chat_template` calls) for the CONVERSATIONS below, with the bos/eos/unk/pad
  token texts of the file as apply_chat_template passes its special tokens.
- With llama-cpp-python installed: llama.cpp's built-in ChatML formatting
  (`llama_chat_apply_template` with no template), the reference for cera's fallback when a
  file (Gemma 3 270M, a base model) has no template.

Run it once with each (the results merge into the same file), from the repository root:
    python -m venv /tmp/hf && /tmp/hf/bin/pip install transformers jinja2 gguf
    /tmp/hf/bin/python tests/core/data/tokenizer/make_template_reference.py
    /work/venv/bin/python tests/core/data/tokenizer/make_template_reference.py
Model files are found in $CERA_CACHE_DIR/bundles (default ~/.cache/cera), where cera's
bundle fetcher puts them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "chat_template_reference.json"
CACHE = Path(os.environ.get("CERA_CACHE_DIR", Path.home() / ".cache" / "cera")) / "bundles"
MODELS = {
    "smollm2": "smollm2-135m-instruct-q4_1/SmolLM2-135M-Instruct.Q4_1.gguf",
    "qwen05": "qwen2.5-coder-0.5b-instruct-q4_k_m/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    "gemma3": "gemma3-270m-q4_k_m/gemma-3-270m-q4_k_m.gguf",
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city, in °C — with “quotes” & <tags>.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Zürich"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
        },
    },
]

MULTI_TURN = [
    {"role": "system", "content": "You are a terse assistant. Réponds en français si on te le demande."},
    {"role": "user", "content": "What's the weather in Zürich?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}}
        ],
    },
    {"role": "tool", "content": '{"temperature": 21, "sky": "☀️ clear"}'},
    {"role": "assistant", "content": "It is 21 °C and clear in Zürich."},
    {"role": "user", "content": "And 2+3?\nUse the tool.  "},
]

CONVERSATIONS = {
    "simple": {"messages": [{"role": "user", "content": "Hello!"}], "tools": None},
    "system_multi_turn": {
        "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "Hi 👋"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Write \"<b>\" in HTML & JSON: {\"a\": 1}"},
        ],
        "tools": None,
    },
    "tools_multi_turn": {"messages": MULTI_TURN, "tools": TOOLS},
    "no_system_tools": {"messages": MULTI_TURN[1:2], "tools": TOOLS},
}


def _load() -> dict:
    if OUT.exists():
        return json.loads(OUT.read_text())
    return {"conversations": CONVERSATIONS, "transformers": {}, "llama_cpp_chatml": {}}


def _metadata(path: Path) -> dict:
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    out = {}
    for key in ("tokenizer.chat_template", "tokenizer.ggml.tokens", "tokenizer.ggml.bos_token_id",
                "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"):
        field = reader.get_field(key)
        if field is not None:
            out[key] = field.contents()
    return out


def record_transformers(result: dict) -> None:
    import transformers
    from transformers.utils.chat_template_utils import render_jinja_template

    result["transformers_version"] = transformers.__version__
    for key, rel in MODELS.items():
        meta = _metadata(CACHE / rel)
        template = meta.get("tokenizer.chat_template")
        if template is None:
            result["transformers"][key] = None  # no template in the file
            continue
        tokens = meta["tokenizer.ggml.tokens"]
        specials = {}
        for name, k in (("bos_token", "bos"), ("eos_token", "eos"), ("unk_token", "unknown"), ("pad_token", "padding")):
            tid = meta.get(f"tokenizer.ggml.{k}_token_id")
            if tid is not None:
                specials[name] = tokens[tid]
        renders = {}
        for conv, spec in CONVERSATIONS.items():
            for agp in (True, False):
                rendered, _ = render_jinja_template(
                    conversations=[spec["messages"]], tools=spec["tools"], chat_template=template,
                    add_generation_prompt=agp, **specials,
                )
                renders[f"{conv}/{int(agp)}"] = rendered[0]
        result["transformers"][key] = {"special_tokens": specials, "renders": renders}


def record_llama_cpp(result: dict) -> None:
    import ctypes

    import llama_cpp

    result["llama_cpp_python"] = llama_cpp.__version__
    for conv, spec in CONVERSATIONS.items():
        if spec["tools"] is not None:
            continue  # llama.cpp's built-in formats take plain role/content messages
        msgs = spec["messages"]
        arr = (llama_cpp.llama_chat_message * len(msgs))(
            *[llama_cpp.llama_chat_message(role=m["role"].encode(), content=m["content"].encode()) for m in msgs]
        )
        for agp in (True, False):
            buf = ctypes.create_string_buffer(65536)
            n = llama_cpp.llama_chat_apply_template(None, arr, len(msgs), agp, buf, len(buf))
            assert 0 <= n <= len(buf), n
            result["llama_cpp_chatml"][f"{conv}/{int(agp)}"] = buf.raw[:n].decode("utf-8")


def main() -> int:
    result = _load()
    result["conversations"] = CONVERSATIONS
    did = []
    if importlib.util.find_spec("transformers") is not None:
        record_transformers(result)
        did.append("transformers")
    if importlib.util.find_spec("llama_cpp") is not None:
        record_llama_cpp(result)
        did.append("llama.cpp")
    if not did:
        print("neither transformers nor llama-cpp-python is installed: nothing to record", file=sys.stderr)
        return 1
    OUT.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {OUT} ({', '.join(did)})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
