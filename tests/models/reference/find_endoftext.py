"""Look for raw prompts on which Qwen2.5-Coder ends a greedy completion on <|endoftext|>.

    python tests/models/reference/find_endoftext.py [bundle-name]

<|endoftext|> (151643) is not the GGUF's EOS (<|im_end|>, 151645) but llama.cpp marks it
end-of-generation; prompts found here go into prompts.ENDOFTEXT_PROMPTS.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llamacpp_driver import ContextSettings, LlamaCppModel  # noqa: E402

CANDIDATES = [
    'print("Hello, World!")\n',
    "# hello.py\nprint('hello world')\n",
    "def add(a, b):\n    return a + b\n",
    'def greet(name):\n    return f"Hello, {name}!"\n\n\nif __name__ == "__main__":\n    print(greet("World"))\n',
    "import os\n\nprint(os.getcwd())\n",
    "#!/bin/sh\necho hello\n",
    "x = 1\ny = 2\nprint(x + y)\n",
    '{\n  "name": "demo",\n  "version": "1.0.0"\n}\n',
    "<?php\necho 'Hello';\n?>\n",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
]


def main() -> int:
    from cera.sources import bundles

    name = sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-coder-1.5b-instruct-q4_k_m"
    model = LlamaCppModel(bundles.fetch_file(name, quiet=True), ContextSettings(n_ctx=256))
    for text in CANDIDATES:
        model.reset()
        logits = model.eval(model.tokenize(text, add_special=True, parse_special=False))
        out = []
        for _ in range(32):
            token = int(np.argmax(logits))
            out.append(token)
            if model.is_eog(token):
                break
            logits = model.eval([token])
        print(repr(text), "->", out[-1], model.token_text(out[-1]) if model.is_eog(out[-1]) else "(no eog)",
              repr(model.detokenize(out)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
