"""`--chat-template FILE|NAME` on run, chat and serve: the chosen template renders the
conversation instead of the file's own (the reply equals a raw run of the text it renders),
'chatml' and the file's named templates are names, and a name or file that is neither, or
a template that does not parse, is an error before any prompt."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# user turns as "Q: ...", replies as "A:..." (the reply follows the generation prompt as the model wrote it): the generation prompt "A:" starts a reply
TEMPLATE = (
    "{%- for m in messages -%}{%- if m.role == 'assistant' -%}A:{{ m.content }}{{ '\\n' }}{%- else -%}"
    "Q: {{ m.content }}{{ '\\n' }}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}A:{%- endif -%}"
)


def cera(*args, stdin=None):
    env = dict(os.environ)
    env.pop("CERA_PLUGINS", None)
    return subprocess.run([sys.executable, "-m", "cera_cli.main", *args], capture_output=True, text=True, env=env,
                          input=stdin, timeout=300)  # fmt: skip


@pytest.fixture
def template_file(tmp_path):
    p = tmp_path / "qa.jinja"
    p.write_text(TEMPLATE)
    return p


GREEDY = ("-n", "8", "--temp", "0", "-q", "--no-timings")


def test_run_renders_through_the_chosen_template(smollm2_path, template_file):
    chosen = cera("run", "-m", str(smollm2_path), "--chat-template", str(template_file), *GREEDY, "What is 2+2?")
    assert chosen.returncode == 0, chosen.stderr
    raw = cera("run", "-m", str(smollm2_path), "--raw", *GREEDY, "-p", "Q: What is 2+2?\nA:")
    assert raw.returncode == 0, raw.stderr
    assert chosen.stdout == raw.stdout and chosen.stdout.strip()
    own = cera("run", "-m", str(smollm2_path), *GREEDY, "What is 2+2?")
    assert own.returncode == 0 and own.stdout != chosen.stdout  # the file's own template gives another prompt


def test_names_and_refusals(smollm2_path, tmp_path):
    ok = cera("run", "-m", str(smollm2_path), "--chat-template", "chatml", *GREEDY, "Hi")
    assert ok.returncode == 0, ok.stderr
    bad = cera("run", "-m", str(smollm2_path), "--chat-template", "nope", *GREEDY, "Hi")
    assert bad.returncode == 1 and "neither a Jinja file nor a template name" in bad.stderr and "'chatml'" in bad.stderr
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}{{ m.content }")
    r = cera("chat", "-m", str(smollm2_path), "--chat-template", str(broken), "-q", stdin="Hi\n")
    assert r.returncode == 1 and "does not parse" in r.stderr


def test_serve_renders_through_the_chosen_template(smollm2_path, template_file):
    pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e ./cera-serve)")
    pytest.importorskip("openai", reason="the openai package is not installed (pip install openai)")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "serve"))
    from test_openai_client import ServerThread

    import cera as cera_api

    loaded = cera_api.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    try:
        with ServerThread(loaded, parallel=1, n_ctx=256, chat_templates=(str(template_file),)) as s:
            c = s.client()
            chat = c.chat.completions.create(model="x", messages=[{"role": "user", "content": "What is 2+2?"}],
                                             max_tokens=8, temperature=0)  # fmt: skip
            raw = c.completions.create(model="x", prompt="Q: What is 2+2?\nA:", max_tokens=8, temperature=0)
            assert chat.choices[0].message.content == raw.choices[0].text.strip() or \
                chat.choices[0].message.content == raw.choices[0].text
    finally:
        loaded.close()
