"""Every command that runs a model takes the default one without -m, as `cera run` does:
tokenize, template and inspect the default language model, embed the default embedding
model. Outputs are checked against the model files read directly (their tokenizer, chat
template and metadata, and the embedding through the Python API)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np


def cera(*args):
    env = dict(os.environ)
    env.pop("CERA_PLUGINS", None)
    return subprocess.run([sys.executable, "-m", "cera_cli.main", *map(str, args)], capture_output=True, text=True,
                          timeout=600, env=env)  # fmt: skip


def test_tokenize_template_and_inspect_take_the_default_model():
    from cera.formats.gguf import GGUFFile
    from cera.sources import bundles
    from cera.text.chat_template import ChatTemplate
    from cera.text.tokenizer import Tokenizer

    path = bundles.fetch_file(bundles.DEFAULT_MODEL, quiet=True)
    with GGUFFile(path) as g:
        tok = Tokenizer.from_gguf(g)
        tmpl = ChatTemplate.from_gguf(g)
        arch = g.metadata["general.architecture"]
    r = cera("tokenize", "Hello world", "--ids")
    assert r.returncode == 0, r.stderr
    assert [int(x) for x in r.stdout.split()] == tok.encode("Hello world", add_special=True)
    msgs = [{"role": "user", "content": "hi"}]
    r = cera("template", "--messages", json.dumps(msgs))
    assert r.returncode == 0, r.stderr
    assert r.stdout == tmpl.render(msgs, add_generation_prompt=True)
    r = cera("inspect", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["architecture"] == arch


def test_embed_takes_the_default_embedding_model():
    import cera as cera_api
    from cera_cli.commands.embed import DEFAULT_EMBEDDING_MODEL

    r = cera("embed", "a text", "--json")
    assert r.returncode == 0, r.stderr
    (got,) = json.loads(r.stdout)
    model = cera_api.load(DEFAULT_EMBEDDING_MODEL, device="cpu", quiet=True)
    try:
        want = model.embed(["a text"])[0]
    finally:
        model.close()
    assert np.allclose(got["embedding"], want, atol=1e-5)
