"""Coverage-guided fuzzing of the GGUF reader and the tokenizer with atheris (libFuzzer for
Python), run by hand; the tests never start it.

    pip install atheris
    python tests/fuzz/atheris_target.py gguf  [libFuzzer options, e.g. -max_total_time=600 corpus/]
    python tests/fuzz/atheris_target.py tokenizer [...]
    python tests/fuzz/atheris_target.py template [...]

``gguf``: the input is a GGUF file. Seeds are the tiny models and small files (start from a
corpus folder holding them for the best coverage: ``--make-corpus DIR`` writes one). The
reader must accept the file or raise `InvalidModelFile` (or `ModelNotFound`); anything
else is a finding. Accepted files also go through the tokenizer's construction, since its
tables come from the same metadata.

``tokenizer``: the first byte picks a vocabulary (llama.cpp's test vocabularies and the tiny
models' vocabularies), the rest is text to encode, decode and stream back. Any exception
but a `CeraError` is a finding.

``template``: the input is a chat template's source, rendered with a small budget. Any
outcome but a prompt or a `TemplateError` is a finding; so is a render that takes far
longer than the budget.

libFuzzer keeps a crashing input as ``crash-<sha1>``; turn it into a regression test in
tests/fuzz/test_regressions.py (or keep the file under tests/fuzz/regressions/). A hang
shows as libFuzzer's timeout (set ``-timeout=10``); a memory blow-up as its ``-rss_limit_mb``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TINY = REPO / "tests" / "models" / "reference" / "tiny"


def _vocab_files() -> list[Path]:
    files = sorted(TINY.glob("*.gguf"))
    cache = Path(os.environ.get("CERA_CACHE_DIR", Path.home() / ".cache" / "cera")) / "bundles" / "llama.cpp-vocab"
    files += sorted(cache.glob("*.gguf"))
    return files


def gguf_target():
    from cera.errors import CeraError, InvalidModelFile, ModelNotFound
    from cera.formats.gguf import GGUFFile
    from cera.text.tokenizer import Tokenizer

    scratch = Path(tempfile.mkdtemp(prefix="cera-atheris-")) / "input.gguf"

    def test_one(data: bytes) -> None:
        scratch.write_bytes(data)
        try:
            g = GGUFFile(scratch)
        except (InvalidModelFile, ModelNotFound):
            return
        with g:
            for name, info in g.tensors.items():
                assert 0 <= info.offset and info.offset + info.nbytes <= len(data), name
                g.tensor_data(name)
            if "tokenizer.ggml.model" in g.metadata:
                try:
                    tok = Tokenizer.from_gguf(g)
                    tok.decode(tok.encode("Hello, world! 🙂", parse_special=True))
                except CeraError:
                    pass

    return test_one


def tokenizer_target():
    import atheris

    from cera.errors import CeraError
    from cera.formats.gguf import GGUFFile
    from cera.text.tokenizer import Tokenizer

    tokenizers = []
    for path in _vocab_files():
        try:
            with GGUFFile(path) as g:
                tokenizers.append(Tokenizer.from_gguf(g))
        except CeraError:
            continue
    assert tokenizers, "no vocabulary found (fetch llama.cpp-vocab with the test fixtures, or the tiny models)"

    def test_one(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        tok = tokenizers[fdp.ConsumeIntInRange(0, len(tokenizers) - 1)]
        flags = fdp.ConsumeIntInRange(0, 3)
        text = fdp.ConsumeUnicode(fdp.remaining_bytes())
        try:
            ids = tok.encode(text, add_special=bool(flags & 1), parse_special=bool(flags & 2))
            tok.decode(ids)
            d = tok.detokenizer()
            for i in ids:
                d.feed(i)
            d.flush()
        except CeraError:
            pass

    return test_one


def template_target():
    from cera.text.chat_template import ChatTemplate
    from cera.errors import TemplateError
    from cera.text.template_budget import TemplateBudget

    budget = TemplateBudget(seconds=0.2, compile_seconds=1.0)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]

    def test_one(data: bytes) -> None:
        source = data.decode("utf-8", "replace")
        t0 = time.monotonic()
        try:
            out = ChatTemplate(source, budget=budget).render(messages)
            assert " at 0x" not in out or " at 0x" in source, "a memory address in the output"
        except TemplateError:
            pass
        assert time.monotonic() - t0 < 5, "a render ran far past its budget"

    return test_one


def make_corpus(folder: Path) -> None:
    """Seed files for the gguf target: the tiny models, whole and cut to their headers."""
    folder.mkdir(parents=True, exist_ok=True)
    for p in sorted(TINY.glob("*.gguf")):
        data = p.read_bytes()
        (folder / p.name).write_bytes(data)
        (folder / f"{p.stem}-head.gguf").write_bytes(data[:16384])
    print(f"wrote {len(list(folder.iterdir()))} seeds to {folder}")


TARGETS = {"gguf": gguf_target, "tokenizer": tokenizer_target, "template": template_target}


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "--make-corpus":
        make_corpus(Path(sys.argv[2]))
        return
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {{{'|'.join(TARGETS)}}} [libFuzzer options] | --make-corpus DIR")
    try:
        import atheris
    except ImportError:
        sys.exit("atheris is not installed: pip install atheris")
    name = sys.argv.pop(1)
    test_one = TARGETS[name]()  # imports what the target runs, lazily imported modules included
    import cera.text.tokenizer.bpe  # noqa: F401
    import cera.text.tokenizer.pretokenize  # noqa: F401
    import cera.text.tokenizer.spm  # noqa: F401
    import cera.text.tokenizer.ugm  # noqa: F401
    import cera.text.tokenizer.wpm  # noqa: F401

    atheris.instrument_all()  # coverage of everything loaded now: cera, and jinja2 for templates
    atheris.Setup(sys.argv, test_one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
