"""Tool calling from the command line: `cera run --tools` prints only the calls' JSON array
on stdout (``[]`` for prose), the text and timings on stderr; `cera chat --tools` shows
calls and takes results; bad --tools input names the flag and the problem; `cera inspect`
names the format."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "The city"}},
                "required": ["city"],
            },
        },
    }
]


def cera(*args, stdin: str | None = None, cwd=None):
    env = dict(os.environ)
    env.pop("CERA_PLUGINS", None)
    return subprocess.run(
        [sys.executable, "-m", "cera_cli.main", *map(str, args)],
        input=stdin, capture_output=True, text=True, timeout=600, env=env, cwd=cwd,
    )  # fmt: skip


@pytest.fixture
def weather_file(tmp_path):
    path = tmp_path / "weather.json"
    path.write_text(json.dumps(WEATHER))
    return path


def test_run_prints_the_calls_as_json_on_stdout(qwen05_path, weather_file):
    r = cera(
        "run", "-m", qwen05_path, "--tools", f"@{weather_file}", "--temp", "0", "-p", "What's the weather in Paris?"
    )
    assert r.returncode == 0, r.stderr
    calls = json.loads(r.stdout)  # stdout is the array and nothing else
    assert [c["name"] for c in calls] == ["get_weather"] and calls[0]["arguments"] == {"city": "Paris"}
    assert calls[0]["id"].startswith("call_")
    assert "tok/s" in r.stderr


def test_run_with_tool_choice_none_prints_an_empty_array_and_the_text_on_stderr(qwen05_path):
    r = cera("run", "-m", qwen05_path, "--tools", json.dumps(WEATHER), "--tool-choice", "none", "--temp", "0", "-n", "30",
             "-p", "Say hello")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []
    assert r.stderr.strip()  # the prose went to stderr


def test_required_and_constrained_calls_validate(qwen05_path, weather_file):
    jsonschema = pytest.importorskip("jsonschema")
    r = cera("run", "-m", qwen05_path, "--tools", f"@{weather_file}", "--tool-choice", "required", "--temp", "0",
             "-p", "Hello there!")  # fmt: skip
    assert r.returncode == 0, r.stderr
    calls = json.loads(r.stdout)
    assert calls and all(c["name"] == "get_weather" for c in calls)
    for c in calls:
        jsonschema.validate(c["arguments"], WEATHER[0]["function"]["parameters"])


@pytest.mark.parametrize(
    "args, words",
    [
        (["--tools", "[{oops"], "the --tools JSON is not JSON"),
        (["--tools", "@/nonexistent/tools.json"], "cannot read /nonexistent/tools.json"),
        (["--tools", '[{"name": "a b"}]'], "name 'a b'"),
        (["--tools", "[]"], "lists no tools"),
        (["--tool-choice", "required"], "--tool-choice and --constrain-tools need --tools"),
        (["--tools", json.dumps(WEATHER), "--tool-choice", "get_time"], "'get_time', which is not one of the tools"),
        (["--tools", json.dumps(WEATHER), "--raw"], "--tools needs --chat"),
    ],
)
def test_bad_tool_input_names_the_problem(smollm2_path, args, words):
    r = cera("run", "-m", smollm2_path, "-n", "2", *args, "-p", "hi")
    assert r.returncode != 0
    assert words in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_chat_shows_calls_and_takes_results(qwen05_path, weather_file):
    r = cera("chat", "-m", qwen05_path, "--tools", f"@{weather_file}", "--temp", "0", "-n", "60", "--tool-choice", "required",
             stdin="What's the weather in Paris?\n18 degrees, cloudy\n")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert '[call get_weather({"city": "Paris"})]' in r.stdout
    assert "result of get_weather (call_" in r.stdout and "18 degrees, cloudy" in r.stdout


def test_inspect_names_the_tool_call_format(qwen05_path, smollm2_path):
    r = cera("inspect", "-m", qwen05_path)
    assert "tool calls    Hermes / Qwen" in r.stdout
    r = cera("inspect", "-m", smollm2_path, "--json")
    assert json.loads(r.stdout)["tool_call_format"]["name"] == "generic"


@pytest.mark.slow
def test_the_issue_done_when_on_qwen_coder_1_5b(qwen15_path, weather_file):
    r = cera(
        "run", "-m", qwen15_path, "--tools", f"@{weather_file}", "--temp", "0", "-p", "What's the weather in Paris?"
    )
    assert r.returncode == 0, r.stderr
    (call,) = json.loads(r.stdout)
    assert call["name"] == "get_weather" and call["arguments"]["city"] == "Paris"
    r = cera("run", "-m", qwen15_path, "--tools", f"@{weather_file}", "--temp", "0", "-p", "Say hello")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []
