"""Tool-call formats: parsers against hand-written model output, render -> parse round trips
(hypothesis), the streaming splitter against the whole-reply parse on every chunking, and
the call grammars against llguidance with a real vocabulary (Qwen 2's, from llama.cpp's
vocabulary files): a rendered call is accepted, a call missing a required argument or
naming an undeclared tool is refused."""

from __future__ import annotations

import json
import keyword

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cera.tools import (
    FORMATS,
    Generic,
    Granite,
    Hermes,
    Llama3,
    Mistral,
    ParseFailure,
    Phi4,
    Pythonic,
    ReplySplitter,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolCallFailed,
    ToolError,
    call_constraint,
    format_for,
    normalize_choice,
    normalize_tools,
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}
TIME = {
    "name": "get_time",
    "parameters": {
        "type": "object",
        "properties": {"zone": {"type": "string"}, "exact": {"type": "boolean"}, "n": {"type": "integer"}},
    },
}
TOOLS = normalize_tools([WEATHER, TIME])


def calls_of(reply):
    return [(c.name, c.arguments) for c in reply.calls]


# -- tool specs and choices -------------------------------------------------------------------


def test_normalize_tools_accepts_openai_and_bare_specs():
    assert [t.name for t in TOOLS] == ["get_weather", "get_time"]
    assert TOOLS[1].parameters["properties"]["zone"] == {"type": "string"}


@pytest.mark.parametrize(
    "spec, words",
    [
        ("get_weather", "list of function specs"),
        ([{"type": "retrieval"}], "only type 'function'"),
        ([{"name": "9lives"}], "name '9lives'"),
        ([WEATHER, WEATHER], "two tools are named 'get_weather'"),
        ([{"name": "f", "parameters": {"type": "array"}}], "type object"),
        ([{"name": "f", "parameters": {"type": "object", "required": "city"}}], "required must be a list"),
    ],
)
def test_bad_tool_specs_name_the_problem(spec, words):
    with pytest.raises(ToolError, match=words):
        normalize_tools(spec)


def test_tool_choice():
    assert normalize_choice(None, TOOLS) == "auto"
    assert normalize_choice({"type": "function", "function": {"name": "get_time"}}, TOOLS) == "get_time"
    with pytest.raises(ToolError, match="'nope', which is not one of the tools"):
        normalize_choice("nope", TOOLS)
    with pytest.raises(ToolError, match="needs tools"):
        normalize_choice("required", ())


# -- parsers on model output as models write it ----------------------------------------------------


def test_hermes_parallel_calls_and_text():
    text = (
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>'
    )
    r = Hermes().parse(text, TOOLS)
    assert r.content == "Let me check."
    assert calls_of(r) == [("get_weather", {"city": "Paris"}), ("get_time", {"zone": "CET"})]
    assert len({c.id for c in r.calls}) == 2 and all(c.id.startswith("call_") for c in r.calls)


def test_hermes_bare_and_fenced_json_replies_are_calls_but_json_answers_are_not():
    bare = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    fenced = '```json\n{\n  "name": "get_weather",\n  "arguments": {"city": "Oslo"}\n}\n```'
    assert calls_of(Hermes().parse(bare, TOOLS)) == [("get_weather", {"city": "Paris"})]
    assert calls_of(Hermes().parse(fenced, TOOLS)) == [("get_weather", {"city": "Oslo"})]
    answer = '{"city": "Paris", "population": 2100000}'
    r = Hermes().parse(answer, TOOLS)
    assert r.calls == () and r.content == answer
    code = "```python\nprint({'name': 1})\n```"
    assert Hermes().parse(code, TOOLS).content == code


def test_think_block_is_reasoning():
    r = Hermes().parse(
        '<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>',
        TOOLS,
    )
    assert r.reasoning == "The user wants weather."
    assert r.content == "" and calls_of(r) == [("get_weather", {"city": "Rome"})]


@pytest.mark.parametrize(
    "text, reason",
    [
        ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"\n</tool_call>', "not valid JSON"),
        (
            '<tool_call>\n{"name": "launch_rockets", "arguments": {}}\n</tool_call>',
            "'launch_rockets', which is not one of the tools",
        ),
        ('<tool_call>\n{"name": "get_weather", "arguments": "city=Paris"}\n</tool_call>', "string that is not JSON"),
        ('<tool_call>\n{"arguments": {}}\n</tool_call>', "no function name"),
        ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par', "ended inside a call"),
    ],
)
def test_malformed_calls_are_failures_not_exceptions(text, reason):
    r = Hermes().parse("Sure. " + text, TOOLS)
    assert r.calls == ()
    assert len(r.failures) == 1 and reason in r.failures[0].reason
    assert r.content == "Sure."  # the markup never becomes text


def test_hermes_arguments_as_a_json_string_are_read():
    r = Hermes().parse(
        '<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Lima\\"}"}\n</tool_call>', TOOLS
    )
    assert calls_of(r) == [("get_weather", {"city": "Lima"})]


def test_pythonic_lfm2_calls():
    text = "Checking.<|tool_call_start|>[get_weather(city=\"Paris\", unit='c'), get_time(exact=true, n=-3)]<|tool_call_end|>Done."
    r = Pythonic().parse(text, TOOLS)
    assert calls_of(r) == [("get_weather", {"city": "Paris", "unit": "c"}), ("get_time", {"exact": True, "n": -3})]
    assert r.content == "Checking.Done."
    json_form = '<|tool_call_start|>[{"name": "get_time", "arguments": {"zone": "UTC"}}]<|tool_call_end|>'
    assert calls_of(Pythonic().parse(json_form, TOOLS)) == [("get_time", {"zone": "UTC"})]


@pytest.mark.parametrize(
    "body, reason",
    [
        ('get_weather("Paris")', "positional arguments"),
        ("get_weather(city=os.system('x'))", "not a literal value"),
        ("get_weather(city=", "not a Python list of calls"),
        ("[42]", "expected a call"),
    ],
)
def test_pythonic_failures(body, reason):
    r = Pythonic().parse(f"<|tool_call_start|>{body}<|tool_call_end|>", TOOLS)
    assert r.calls == () and reason in r.failures[0].reason


def test_llama3_json_calls():
    r = Llama3().parse(
        '{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "get_time", "parameters": {}}', TOOLS
    )
    assert calls_of(r) == [("get_weather", {"city": "Paris"}), ("get_time", {})]
    tagged = Llama3().parse('<|python_tag|>{"name": "get_time", "parameters": {"zone": "PST"}}', TOOLS)
    assert calls_of(tagged) == [("get_time", {"zone": "PST"})]
    assert Llama3().parse("The weather is fine.", TOOLS).content == "The weather is fine."


def test_mistral_both_call_syntaxes_and_nine_character_ids():
    r = Mistral().parse(
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abcDEF123"}]', TOOLS
    )
    assert calls_of(r) == [("get_weather", {"city": "Paris"})] and r.calls[0].id == "abcDEF123"
    v11 = Mistral().parse('[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}[TOOL_CALLS]get_time[ARGS]{}', TOOLS)
    assert calls_of(v11) == [("get_weather", {"city": "Oslo"}), ("get_time", {})]
    assert all(len(c.id) == 9 and c.id.isalnum() for c in v11.calls)


def test_granite_phi4_and_generic():
    assert calls_of(Granite().parse('<|tool_call|>[{"name": "get_time", "arguments": {"zone": "UTC"}}]', TOOLS)) == [
        ("get_time", {"zone": "UTC"})
    ]
    assert calls_of(Phi4().parse('<|tool_call|>{"name": "get_time", "arguments": {}}<|/tool_call|>', TOOLS)) == [
        ("get_time", {})
    ]
    g = Generic().parse('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}', TOOLS)
    assert calls_of(g) == [("get_weather", {"city": "Paris"})]
    assert Generic().parse('{"answer": 4}', TOOLS).content == '{"answer": 4}'


# -- round trips and streaming ------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False, width=64), st.text(max_size=12),
)  # fmt: skip
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
identifiers = st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True).filter(
    lambda s: s not in ("true", "false", "null") and not keyword.iskeyword(s)  # Python's own words are no call names
)
call_lists = st.lists(
    st.builds(lambda n, a: ToolCall("", n, a), identifiers, st.dictionaries(identifiers, json_values, max_size=4)),
    min_size=1,
    max_size=3,
)


@pytest.mark.parametrize("fmt", [F() for F in FORMATS], ids=lambda f: f.name)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=call_lists, cuts=st.lists(st.integers(0, 400), max_size=6))
def test_render_then_parse_gives_the_calls_back_on_any_chunking(fmt, calls, cuts):
    text = fmt.render(calls)
    whole = fmt.parse(text)  # no tools given: any name is taken
    assert [(c.name, c.arguments) for c in whole.calls] == [(c.name, c.arguments) for c in calls]
    assert whole.failures == () and whole.content == ""
    # streamed in arbitrary pieces: the same calls, and no markup in the text deltas
    splitter = ReplySplitter(fmt, ())
    pieces, at = [], 0
    for cut in sorted(set(cuts)):
        if cut > at:
            pieces.append(text[at:cut])
            at = cut
    pieces.append(text[at:])
    events = [e for p in pieces for e in splitter.feed(p)] + splitter.finish()
    assert [(e.call.name, e.call.arguments) for e in events if isinstance(e, ToolCallEvent)] == [
        (c.name, c.arguments) for c in calls
    ]
    assert not any(isinstance(e, TextDelta) for e in events)


@settings(max_examples=80, deadline=None)
@given(
    prose=st.text(alphabet=st.characters(blacklist_characters="<{[`"), max_size=30),
    cuts=st.lists(st.integers(0, 200), max_size=8),
)
def test_streamed_text_is_the_prose_without_markup(prose, cuts):
    fmt = Hermes()
    call = fmt.render([ToolCall("", "get_weather", {"city": "Paris"})])
    text = f"{prose}{call}{prose}"
    splitter = ReplySplitter(fmt, TOOLS)
    at = 0
    events = []
    for cut in sorted(set(cuts)) + [len(text)]:
        if cut > at:
            events += splitter.feed(text[at:cut])
            at = cut
    events += splitter.finish()
    streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert streamed == prose + prose.lstrip()  # whitespace right after a call is the call's, not text
    assert "<tool" not in streamed and "tool_call" not in streamed
    assert [e.call.name for e in events if isinstance(e, ToolCallEvent)] == ["get_weather"]
    assert not any(isinstance(e, ToolCallFailed) for e in events)


def test_text_streams_before_the_reply_ends():
    """Prose is not held back: what cannot be the start of a marker goes out at once."""
    s = ReplySplitter(Hermes(), TOOLS)
    out = s.feed("The weather in Paris is ")
    assert "".join(e.text for e in out) == "The weather in Paris is "
    assert s.feed("<tool") == []  # could be <tool_call>: held
    assert "".join(e.text for e in s.feed("box>")) == "<toolbox>"


# -- choosing the format ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "template, arch, name",
    [
        ("...<tool_call>...", "llama", "hermes"),
        ("{{ '<|tool_list_start|>' }}", "llama", "pythonic"),
        ("{% if tools %}{{ tools }}{% endif %}", "lfm2", "pythonic"),
        ("{% if tools %}{{ tools }}{% endif %}", "qwen3", "hermes"),
        ("[AVAILABLE_TOOLS]", "llama", "mistral"),
        ("<|python_tag|>", "llama", "llama3"),
        ("<|tool|>{{ t }}<|/tool|><|tool_call|>", "phi3", "phi4"),
        ("<|start_of_role|>available_tools<|end_of_role|><|tool_call|>", "granite", "granite"),
        ("{{ messages }}", "qwen2", "generic"),
        ("", "llama", "generic"),
    ],
)
def test_format_detection(template, arch, name):
    assert format_for(architecture=arch, template=template).name == name


# -- grammars, with a real vocabulary --------------------------------------------------------------


@pytest.fixture(scope="module")
def qwen_tokenizer(qwen05_path):
    """Qwen2.5's vocabulary, where <tool_call> and </tool_call> are tokens of their own."""
    from cera.formats.gguf import GGUFFile
    from cera.text.tokenizer.tokenizer import Tokenizer

    return Tokenizer.from_gguf(GGUFFile(qwen05_path))


@pytest.fixture(scope="module")
def old_qwen_tokenizer(llama_vocab_dir):
    """Qwen 2's vocabulary (llama.cpp's test file), which has no tool-call tokens."""
    from cera.formats.gguf import GGUFFile
    from cera.text.tokenizer.tokenizer import Tokenizer

    return Tokenizer.from_gguf(GGUFFile(llama_vocab_dir / "ggml-vocab-qwen2.gguf"))


def matcher(grammar_text, tok):
    import llguidance

    from cera.grammar.vocab import ll_tokenizer

    lt = ll_tokenizer(tok, tok.vocab.n_tokens)
    g = llguidance.LLMatcher.grammar_from_lark(grammar_text)
    err, msgs = llguidance.LLMatcher.validate_grammar_with_warnings(g, lt)
    assert not err, msgs
    return llguidance.LLMatcher(lt, g, log_level=0)


def accepts(grammar_text, tok, text: str) -> bool:
    m = matcher(grammar_text, tok)
    ids = tok.encode(text, add_special=False, parse_special=True)
    return m.consume_tokens(ids) and m.is_accepting()


GRAMMAR_FORMATS = [Hermes(), Pythonic(), Mistral(), Llama3(), Phi4(), Granite(), Generic()]


@pytest.mark.parametrize("fmt", GRAMMAR_FORMATS, ids=lambda f: f.name)
def test_grammar_accepts_rendered_calls_and_refuses_bad_ones(fmt, qwen_tokenizer):
    tok = qwen_tokenizer
    g = fmt.grammar(TOOLS, tok)
    good = [ToolCall("", "get_weather", {"city": "Paris", "unit": "c"}), ToolCall("", "get_time", {"exact": True})]
    if fmt.name == "pythonic":  # its grammar writes arguments in declared order
        good = [
            ToolCall("", "get_weather", {"city": "Paris"}),
            ToolCall("", "get_time", {"zone": "UTC", "exact": False}),
        ]
    assert accepts(g, tok, fmt.render(good)), fmt.render(good)
    assert accepts(g, tok, fmt.render(good[:1]))
    missing_required = fmt.render([ToolCall("", "get_weather", {"unit": "c"})])
    assert not accepts(g, tok, missing_required)
    undeclared = fmt.render([ToolCall("", "launch", {})])
    assert not accepts(g, tok, undeclared)
    wrong_type = fmt.render([ToolCall("", "get_time", {"n": "three"})])
    assert not accepts(g, tok, wrong_type)


def test_hermes_markers_are_matched_as_their_special_tokens(qwen_tokenizer):
    tok = qwen_tokenizer
    g = Hermes().grammar(TOOLS, tok)
    start = tok.token_id("<tool_call>")
    assert f"<[{start}]>" in g
    lazy = call_constraint(Hermes(), TOOLS, "auto", tok, constrain=True)
    assert lazy.is_lazy and any(t.token == start for t in lazy.triggers)
    assert call_constraint(Hermes(), TOOLS, "auto", tok, constrain=False) is None
    assert not call_constraint(Hermes(), TOOLS, "required", tok, constrain=False).is_lazy
    named = call_constraint(Hermes(), TOOLS, "get_time", tok, constrain=False)
    assert "get_weather" not in named.source and "get_time" in named.source
    assert call_constraint(Hermes(), TOOLS, "none", tok, constrain=True) is None


def test_markers_without_tokens_of_their_own_are_text(old_qwen_tokenizer):
    tok = old_qwen_tokenizer
    assert tok.token_id("<tool_call>") is None
    g = Hermes().grammar(TOOLS, tok)
    assert '"<tool_call>"' in g
    assert accepts(g, tok, Hermes().render([ToolCall("", "get_weather", {"city": "Paris"})]))
    lazy = call_constraint(Hermes(), TOOLS, "auto", tok, constrain=True)
    assert any(t.word == "<tool_call>" for t in lazy.triggers)


def test_parse_failure_is_data():
    f = Hermes().parse("<tool_call>{oops}</tool_call>", TOOLS).failures[0]
    assert isinstance(f, ParseFailure) and f.raw == "<tool_call>{oops}</tool_call>"
    json.dumps({"raw": f.raw, "reason": f.reason})
