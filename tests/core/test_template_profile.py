"""Template profiles on the chat-template shapes of the families cera serves.

Each template below writes its family's published turn format (ChatML for Qwen and
SmolLM, Llama 3's headers, Gemma's turns, Phi-3 and Phi-4-mini, Granite 3's roles, LFM2's
ChatML with a tool list); the expected generation prompt and end of turn are facts of
those formats, not outputs of the code under test. A toy tokenizer keeps each special
marker one token, as the models' vocabularies do, so token boundaries are checked too.
"""

from __future__ import annotations

import re

import pytest

from cera.text.chat_template import ChatTemplate
from cera.text.template_profile import TemplateProfileError, profile

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

QWEN_TOOLS = (
    "{% if tools %}<|im_start|>system\n# Tools\n<tools>{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n</tools>"
    "<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% elif m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant\n{{ m.content }}"
    "{% for c in m.tool_calls %}<tool_call>\n{\"name\": \"{{ c.function.name }}\", \"arguments\": "
    "{{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

LLAMA3 = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{{ m.content | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

GEMMA = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m.role == 'assistant' else m.role }}\n"
    "{{ m.content | trim }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

PHI3 = (
    "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% else %}{{ eos_token }}{% endif %}"
)

PHI4_MINI = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

GRANITE = (
    "{% for m in messages %}<|start_of_role|>{{ m.role }}<|end_of_role|>{{ m.content }}<|end_of_text|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|start_of_role|>assistant<|end_of_role|>{% endif %}"
)

LFM2 = (
    "{{ bos_token }}{% if tools %}<|im_start|>system\nList of tools: <|tool_list_start|>{{ tools | tojson }}"
    "<|tool_list_end|><|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'tool' %}<|tool_response_start|>{{ m.content }}<|tool_response_end|>"
    "{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# A template that renders only the last message rewrites the conversation at every turn,
# so a turn cannot be continued by appending. (Templates that move a system prompt into the
# last user message are caught turn by turn: tests/integration/test_tool_chat.py.)
LAST_TURN_ONLY = "{% set m = messages[-1] %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n" \
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"  # fmt: skip

SPECIALS = [
    "<|im_start|>", "<|im_end|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|begin_of_text|>",
    "<start_of_turn>", "<end_of_turn>", "<bos>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>",
    "<|endoftext|>", "<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>", "<|tool_list_start|>",
    "<|tool_list_end|>", "<|tool_response_start|>", "<|tool_response_end|>", "<s>", "</s>",
]  # fmt: skip


class MarkerTokenizer:
    """Each special marker is one token; every other character is its own token."""

    def __init__(self, specials):
        self.specials = list(specials)
        self._split = re.compile("(" + "|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True)) + ")")

    def encode(self, text, add_special=False, parse_special=True):
        out = []
        for part in self._split.split(text):
            if part in self.specials:
                out.append(-1 - self.specials.index(part))
            else:
                out.extend(ord(c) for c in part)
        return out

    def decode_bytes(self, ids, special=False, remove_special=False):
        return "".join(self.specials[-1 - i] if i < 0 else chr(i) for i in ids).encode()


TOK = MarkerTokenizer(SPECIALS)


@pytest.mark.parametrize(
    "source, bos, eos, generation_prompt, turn_end",
    [
        (CHATML, "", "<|im_end|>", "<|im_start|>assistant\n", "<|im_end|>\n"),
        (QWEN_TOOLS, "", "<|im_end|>", "<|im_start|>assistant\n", "<|im_end|>\n"),
        (LLAMA3, "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"),
        (GEMMA, "<bos>", "<end_of_turn>", "<start_of_turn>model\n", "<end_of_turn>\n"),
        (PHI3, "", "<|endoftext|>", "<|assistant|>\n", "<|end|>\n"),
        (PHI4_MINI, "", "<|endoftext|>", "<|assistant|>", "<|end|>"),
        (GRANITE, "", "<|end_of_text|>", "<|start_of_role|>assistant<|end_of_role|>", "<|end_of_text|>\n"),
        (LFM2, "<|startoftext|>", "<|im_end|>", "<|im_start|>assistant\n", "<|im_end|>\n"),
    ],
    ids=["chatml", "qwen", "llama3", "gemma", "phi3", "phi4-mini", "granite", "lfm2"],
)
def test_each_family_shape_has_its_turn_seams(source, bos, eos, generation_prompt, turn_end):
    p = profile(ChatTemplate(source, bos_token=bos, eos_token=eos), TOK)
    assert p.generation_prompt == generation_prompt
    assert p.turn_end == turn_end
    assert list(p.turn_end_ids) == TOK.encode(turn_end)


def test_phi3_closing_eos_is_not_taken_for_the_turn_end():
    # a closed Phi-3 conversation ends in <|endoftext|>; a continued one does not: only
    # what both share after the reply is the reply's end
    p = profile(ChatTemplate(PHI3, eos_token="<|endoftext|>"), TOK)
    assert "<|endoftext|>" not in p.turn_end


@pytest.mark.parametrize(
    "source, tools, calls, tool_role",
    [(CHATML, False, False, True), (QWEN_TOOLS, True, True, True), (LFM2, True, False, True)],
    ids=["chatml", "qwen", "lfm2"],
)
def test_what_a_template_renders_of_tools(source, tools, calls, tool_role):
    p = profile(ChatTemplate(source, eos_token="<|im_end|>"), TOK)
    assert (p.renders_tools, p.renders_tool_calls, p.renders_tool_role) == (tools, calls, tool_role)


def test_a_template_that_rewrites_earlier_turns_is_refused_by_name():
    template = ChatTemplate(LAST_TURN_ONLY, eos_token="<|im_end|>", name="probe-me")
    with pytest.raises(TemplateProfileError, match="allow_reevaluation=True") as e:
        profile(template, TOK)
    assert "probe-me" in str(e.value)


def test_the_profile_is_found_once_per_template_and_tokenizer():
    template = ChatTemplate(CHATML, eos_token="<|im_end|>")
    assert profile(template, TOK) is profile(template, TOK)
    other = MarkerTokenizer(SPECIALS)
    assert profile(template, other) == profile(template, TOK)
