"""The prompts of the llama.cpp reference data (see README.md).

Raw prompts are tokenized as they are; chat prompts are lists of messages rendered by
llama.cpp's own chat-template support (llama_chat_apply_template) before tokenizing.
Chat prompts carry an explicit system message so that llama.cpp's built-in rendering and
the file's Jinja template (which adds a default system prompt when none is given) agree.
"""

from __future__ import annotations

LONG_TEXT = (
    "The history of computing is often told as a sequence of machines, but it is just as much "
    "a history of ideas about what a machine should be asked to do. In the nineteenth century, "
    "Charles Babbage designed an engine that could tabulate polynomials by the method of finite "
    "differences, and later a more general engine that would read its instructions from punched "
    "cards. Ada Lovelace, writing notes on a description of that engine, observed that it might "
    "act on things other than numbers, such as musical notes, if their relations could be "
    "expressed in the abstract language of operations. Neither engine was completed in its "
    "designer's lifetime, and for decades the practical work of calculation was done by people, "
    "often called computers, who filled rooms with mechanical desk calculators and carefully "
    "checked tables.\n\n"
    "The twentieth century changed the scale of the problem. Ballistics tables, census counts, "
    "weather forecasts and the design of aircraft all demanded more arithmetic than any room of "
    "clerks could supply. Electromechanical relays gave way to vacuum tubes, which were fast but "
    "fragile, and then to transistors, which were small, cheap and reliable. With each step the "
    "cost of a single operation fell, and people found new uses for the cheaper operations. "
    "Stored-program machines, which kept their instructions in the same memory as their data, "
    "made it possible to write programs that wrote or modified other programs, and so compilers, "
    "operating systems and programming languages were born.\n\n"
    "By the 1970s, integrated circuits placed thousands of transistors on a single chip, and the "
    "microprocessor put an entire central processing unit within reach of hobbyists. Personal "
    "computers appeared in homes and schools; spreadsheets and word processors turned them into "
    "everyday tools for accountants, writers and students. Networks connected the machines to "
    "one another, first within universities and laboratories and later across the whole world, "
    "and the protocols that carried electronic mail and files became the foundation of the web. "
    "Every one of these changes was driven less by a single invention than by the steady, "
    "compounding improvement of many small parts, together with the imagination of the people "
    "who used them.\n\n"
    "Today the same story continues with machines that learn from examples rather than following "
    "only explicit instructions. Large collections of text, images and sound are used to adjust "
    "millions or billions of numerical parameters, and the resulting models can translate "
    "languages, summarise documents, write programs and answer questions. Whether these systems "
    "will be remembered as a turning point or as one more step in a long sequence is a question "
    "that historians of the future will have to answer. What seems certain is that"
)

# id -> text; kept in this order in the data files.
RAW_PROMPTS: dict[str, str] = {
    "en_story": "Once upon a time, in a small village by the sea,",
    "en_fact": "The capital of France is",
    "en_science": "Photosynthesis is the process by which plants",
    "en_howto": "To make a good cup of tea, you should first",
    "en_dialogue": '"Where are you going?" asked the old man.\n"To the market," said the girl. "',
    "code_py_fib": 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "code_py_sort": "# Sort a list of people by age\npeople = [{'name': 'Ann', 'age': 31}, {'name': 'Bob', 'age': 25}]\n",
    "code_c": "#include <stdio.h>\n\nint main(void) {\n",
    "code_js": "function debounce(fn, delay) {\n",
    "code_sql": "SELECT customer_id, COUNT(*) AS orders\nFROM orders\n",
    "multi_fr": "Le petit prince demanda au renard : « Qu'est-ce que signifie apprivoiser ? »",
    "multi_de": "Die Hauptstadt von Deutschland ist Berlin. Die Stadt ist bekannt für",
    "multi_es": "Había una vez un gato que vivía en",
    "multi_zh": "中国的首都是北京。北京是一座",
    "multi_ja": "日本の首都は東京です。東京は",
    "multi_ru": "Москва — столица России. Это город,",
    "num_count": "1, 2, 3, 4, 5, 6, 7,",
    "num_primes": "The first ten prime numbers are: 2, 3, 5,",
    "list_shopping": "Shopping list:\n- apples\n- bread\n-",
    "json_object": '{"name": "Alice", "age": 30, "skills": [',
    "math_qa": "Question: What is 12 times 7?\nAnswer:",
    "emoji": "I love pizza 🍕 and ice cream 🍦 because",
    "whitespace": "Name:\tAlice\nAge:\t30\n\n\n    Indented   text  with   spaces",
    "long_history": LONG_TEXT,
}

CHAT_PROMPTS: dict[str, list[dict]] = {
    "chat_capital": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the capital of Italy? Answer in one word."},
    ],
    "chat_code": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Write a Python function that reverses a string."},
    ],
    "chat_multiturn": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hi! My name is Sam."},
        {"role": "assistant", "content": "Hello Sam! How can I help you today?"},
        {"role": "user", "content": "What is my name?"},
    ],
}

# Raw completions that Qwen2.5-Coder ends on <|endoftext|> (151643, not its GGUF EOS).
# Found by trying short, self-contained code files (see README.md).
ENDOFTEXT_PROMPTS: dict[str, str] = {
    "code_py_greet_eot": (
        'def greet(name):\n    return f"Hello, {name}!"\n\n\nif __name__ == "__main__":\n    print(greet("World"))\n'
    ),
}

# Cases whose llama.cpp self-consistency (one batch vs token by token, flash attention
# off vs auto) is measured.
SELF_CONSISTENCY_CASES = ["en_story", "code_py_fib", "multi_zh", "chat_capital", "long_history"]

# Tiny random-weight models have a tiny English-only tokenizer: short ASCII prompts.
TINY_PROMPTS: dict[str, str] = {
    "t_story": "Once upon a time there was a little cat who lived in a big house.",
    "t_fact": "The sun is a star. The moon goes around the earth and",
    "t_code": "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n",
    "t_numbers": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
    "t_list": "Things to do today:\n- buy milk\n- call mom\n- write the report\n-",
    "t_long": (
        "The old lighthouse stood at the end of the rocky point, and every night its lamp turned "
        "slowly over the dark water. The keeper climbed the stairs at dusk, cleaned the glass, "
        "trimmed the wick and wrote the weather in his book. Ships passed far out at sea, and "
        "sometimes one of them answered the light with a short blast of its horn."
    ),
}
TINY_SELF_CONSISTENCY_CASES = ["t_story", "t_long"]
