"""A multi-turn tool loop with cera's chat coordinator (python examples/tool_loop.py).

The application decides when the model must look something up (tool_choice="required")
and when it must answer (tool_choice="none"); every turn after the first evaluates only
the new messages, which the printed usage shows (evaluated / whole prompt).
"""

import cera

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
FAKE_WEATHER = {"Paris": "18 C, light rain", "Berlin": "12 C, sunny"}


def main(model: str = "qwen2.5-coder-1.5b-instruct-q4_k_m") -> None:
    loaded = cera.load(model)
    chat = loaded.chat(
        system="You are a weather assistant. Call get_weather to look up weather. After a tool response "
        "arrives, answer the user in one plain English sentence, never in JSON.",
        tools=[WEATHER],
        n_ctx=4096,
    )

    def turn(**kw):
        r = chat.complete(temperature=0, **kw)
        print(
            f"  assistant: {r.text!r} calls={[(c.name, c.arguments) for c in r.tool_calls]} "
            f"({r.finish_reason.value}; evaluated {r.usage.evaluated_tokens} of {r.usage.prompt_tokens} prompt tokens)"
        )
        return r  # fmt: skip

    for question in ("What's the weather in Paris?", "And in Berlin?"):
        print(f"user: {question}")
        chat.ingest(question)
        for call in turn(tool_choice="required").tool_calls:
            result = FAKE_WEATHER.get(call.arguments.get("city"), "unknown")
            print(f"  tool {call.name}({call.arguments}) -> {result!r}")
            chat.ingest_tool_response(call.id, result)
        turn(tool_choice="none")
    print("user: Which city is warmer?")
    chat.ingest("Which city is warmer?")
    turn(tool_choice="none")


if __name__ == "__main__":
    main()
