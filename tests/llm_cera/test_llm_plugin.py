"""llm-cera, driven by the real `llm` package: its command line (in a fresh process, as
people run it) and its Python API. Replies are compared with cera's own chat on the same
model, greedy, token for token."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

llm = pytest.importorskip("llm", reason="the llm package is not installed (pip install -e ./llm-cera)")
pytest.importorskip("llm_cera", reason="llm-cera is not installed (pip install -e ./llm-cera)")

from cera.sources import bundles  # noqa: E402

BUNDLE = "smollm2-135m-instruct-q4_1"


@pytest.fixture
def llm_home(tmp_path, monkeypatch):
    home = tmp_path / "llm"
    home.mkdir()
    monkeypatch.setenv("LLM_USER_PATH", str(home))
    return home


def run_llm(*args, stdin: str | None = None):
    env = dict(os.environ)
    env.pop("CERA_PLUGINS", None)
    return subprocess.run([sys.executable, "-m", "llm", *map(str, args)], input=stdin, capture_output=True, text=True,
                          env=env, timeout=300)  # fmt: skip


@pytest.fixture(scope="module")
def cera_chat_replies(smollm2_path):
    """What cera's own chat answers, greedy, 12 tokens a turn."""
    import cera

    with cera.load(smollm2_path, device="cpu", quiet=True) as model:
        chat = model.chat()
        first = chat.send("My name is Ada. Say hello.", temperature=0, max_tokens=12).text
        second = chat.send("What is my name?", temperature=0, max_tokens=12).text
        single = model.chat().send("Why is the sky blue?", temperature=0, max_tokens=12).text
    return first, second, single


def test_llm_lists_the_cera_models(llm_home, smollm2_path):
    r = run_llm("models", "list")
    assert r.returncode == 0, r.stderr
    assert f"cera: cera/{bundles.DEFAULT_MODEL} (aliases: cera)" in r.stdout  # the alias names the default
    assert "cera/silero-vad" not in r.stdout  # not a language model


def test_llm_prompt_by_bundle_and_by_path_streams_ceras_reply(llm_home, smollm2_path, cera_chat_replies):
    _, _, single = cera_chat_replies
    for model in (f"cera/{BUNDLE}", f"cera/{smollm2_path}"):
        r = run_llm("-m", model, "Why is the sky blue?", "-o", "temperature", "0", "-o", "max_tokens", "12")
        assert r.returncode == 0, (model, r.stderr)
        assert r.stdout == single + "\n", model


def test_llm_chat_keeps_the_kv_cache_between_turns(llm_home, smollm2_path, cera_chat_replies):
    first, second, _ = cera_chat_replies
    r = run_llm("chat", "-m", f"cera/{BUNDLE}", "-o", "temperature", "0", "-o", "max_tokens", "12",
                stdin="My name is Ada. Say hello.\nWhat is my name?\nexit\n")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert first in r.stdout and second in r.stdout
    logs = run_llm("logs", "-n", "0", "--json")
    assert logs.returncode == 0, logs.stderr
    entries = sorted(json.loads(logs.stdout), key=lambda e: e["datetime_utc"])
    rows = [e["response_json"] for e in entries]
    assert len(rows) == 2, logs.stdout
    assert rows[0]["prompt_tokens_reused"] == 0
    # the second turn evaluates only the new message: the first turn's tokens come from the cache
    assert rows[1]["prompt_tokens_reused"] > rows[1]["prompt_tokens_evaluated"] > 0


def test_python_api_conversation_matches_ceras_chat(llm_home, smollm2_path, cera_chat_replies):
    first, second, _ = cera_chat_replies
    model = llm.get_model(f"cera/{BUNDLE}")
    conversation = model.conversation()
    a = conversation.prompt("My name is Ada. Say hello.", temperature=0, max_tokens=12)
    assert a.text() == first
    b = conversation.prompt("What is my name?", temperature=0, max_tokens=12)
    assert b.text() == second
    assert b.response_json["prompt_tokens_reused"] > 0
    assert b.usage().output == 12 or b.response_json["finish_reason"] == "stop"


def test_sampling_records_the_seed_that_repeats_it(llm_home, smollm2_path):
    model = llm.get_model(f"cera/{BUNDLE}")
    first = model.prompt("Tell me a word.", temperature=1.0, max_tokens=8)
    text = first.text()
    seed = first.response_json["seed"]
    assert isinstance(seed, int)
    again = model.prompt("Tell me a word.", temperature=1.0, max_tokens=8, seed=seed)
    assert again.text() == text


def test_added_paths_and_clear_errors(llm_home, smollm2_path, tmp_path):
    r = run_llm("cera", "add", smollm2_path, "--name", "smol")
    assert r.returncode == 0, r.stderr
    assert run_llm("models", "list").stdout.count("cera/smol\n") == 1
    ok = run_llm("-m", "cera/smol", "hi", "-o", "temperature", "0", "-o", "max_tokens", "3")
    assert ok.returncode == 0 and ok.stdout.strip(), ok.stderr
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOTGGUF" + b"\0" * 64)
    r = run_llm("cera", "add", bad, "--name", "bad")
    broken = run_llm("-m", "cera/bad", "hi")
    assert broken.returncode == 1
    assert "Error: cera: " in broken.stderr and "bad magic" in broken.stderr and "Traceback" not in broken.stderr


def test_schema_constrains_the_reply_to_json_of_that_shape(llm_home, smollm2_path):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 24}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    r = run_llm("-m", f"cera/{BUNDLE}", "Invent a person.", "--schema", json.dumps(schema), "-o", "temperature", "0")
    assert r.returncode == 0, r.stderr
    value = json.loads(r.stdout)
    assert set(value) == {"name", "age"}
    assert isinstance(value["name"], str) and len(value["name"]) <= 24 and isinstance(value["age"], int)


# -- tools ------------------------------------------------------------------------------------

QWEN05 = "qwen2.5-coder-0.5b-instruct-q4_k_m"


def get_weather(city: str) -> str:
    "Get the current weather in a city"
    return f"18 degrees, light rain in {city}"


def test_tools_calls_reach_llm_and_results_come_back_with_the_cache_kept(llm_home, qwen05_path):
    """llm's tool loop by hand (as `llm -T` and chain() run it): the reply's call reaches llm
    as a ToolCall (no markup in the text), llm runs the tool, and the next turn evaluates only
    the tool result. Its reply must be what cera's own chat writes from the same messages."""
    import cera

    model = llm.get_model(f"cera/{QWEN05}")
    conversation = model.conversation()
    first = conversation.prompt("What's the weather in Paris?", tools=[get_weather], temperature=0, max_tokens=60)
    assert first.text() == ""
    calls = first.tool_calls()
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Paris"})]
    results = first.execute_tool_calls()
    assert [r.output for r in results] == ["18 degrees, light rain in Paris"]
    second = conversation.prompt(tool_results=results, tools=[get_weather], temperature=0, max_tokens=60)
    text, again = second.text(), second.tool_calls()
    evaluated = first.response_json["prompt_tokens_evaluated"]
    assert second.response_json["prompt_tokens_reused"] > evaluated > second.response_json["prompt_tokens_evaluated"]

    # the same conversation in cera's own chat, the tool spec written out by hand
    spec = {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                             "parameters": llm.Tool.function(get_weather).input_schema}}  # fmt: skip
    with cera.load(qwen05_path, device="cpu", quiet=True) as m:
        chat = m.chat(tools=[spec])
        chat.ingest("What's the weather in Paris?")
        turn = chat.complete(temperature=0, max_tokens=60)
        assert [(c.name, c.arguments) for c in turn.tool_calls] == [("get_weather", {"city": "Paris"})]
        chat.ingest_tool_response(turn.tool_calls[0].id, "18 degrees, light rain in Paris")
        want = chat.complete(temperature=0, max_tokens=60)
    assert text == want.text
    assert [(c.name, c.arguments) for c in again] == [(c.name, c.arguments) for c in want.tool_calls]


@pytest.mark.slow
def test_llm_functions_run_a_tool_and_answer_from_its_result(llm_home, qwen15_path):
    """The llm command line's own tool loop (--functions, --td) on Qwen2.5-Coder-1.5B: the
    call is made, the tool runs, and the reply reads its result."""
    tool = 'def get_weather(city: str) -> str:\n    "Get the current weather in a city"\n    return "18 degrees, light rain in " + city\n'
    r = run_llm("-m", "cera/qwen2.5-coder-1.5b-instruct-q4_k_m", "--functions", tool, "--td", "--chain-limit", "3",
                "-o", "temperature", "0", "-o", "max_tokens", "80", "What's the weather in Paris?")  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "Tool call: get_weather({'city': 'Paris'})" in out, out
    assert "18 degrees" in r.stdout and "<tool_call>" not in r.stdout, r.stdout
