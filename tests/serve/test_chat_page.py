"""The chat page at ``/`` in a real headless browser (Debian's chromium, driven through the
DevTools protocol): what it shows streamed is the text chat completions gives for the same
conversation (system prompt and sampling settings included, a second turn carrying the
first), Stop cancels the generation on the server, the model choice lists the
server's models and sends to the one chosen, and a model that takes images gets an image
button whose files go as image_url data: parts. Skips where no chromium is installed."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e ./cera-serve)")
pytest.importorskip("openai", reason="the openai package is not installed (pip install openai)")
ws_client = pytest.importorskip("websockets.sync.client", reason="websockets is not installed (pip install websockets)")

from test_openai_client import ServerThread  # noqa: E402 - the serve tests share their server harness

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)

SYSTEM = "You are a helpful assistant. Answer briefly."


class Browser:
    """A headless chromium and its one page, over the DevTools protocol."""

    def __init__(self):
        self.profile = tempfile.mkdtemp(prefix="cera-chromium-")
        self.stack = contextlib.ExitStack()
        self.proc = subprocess.Popen(
            [BROWSER, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.time() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.time() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not start its DevTools endpoint")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            page = next(t for t in json.loads(r.read()) if t["type"] == "page")
        self.ws = self.stack.enter_context(ws_client.connect(page["webSocketDebuggerUrl"], max_size=None))
        self.n = 0

    def call(self, method: str, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=120))
            if msg.get("id") == self.n:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def js(self, expression: str):
        r = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, expression: str, timeout: float = 120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.05)
        status = self.js("$('status').textContent")
        raise AssertionError(f"timed out waiting for {expression}; status: {status!r}")

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait("document.readyState === 'complete' && document.body.dataset.state === 'idle'")

    def set(self, element: str, value) -> None:
        self.js(f"$({json.dumps(element)}).value = {json.dumps(str(value))}")

    def say(self, text: str) -> None:
        self.set("input", text)
        self.js("$('send').click()")

    def close(self) -> None:
        self.stack.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def server(loaded, smollm2_path):
    # two ids: the loaded model, and the same file again under another name (loaded when chosen)
    with ServerThread(loaded, models=(str(smollm2_path), str(smollm2_path)), aliases=("small", "again"), parallel=2,
                      n_ctx=1024) as s:  # fmt: skip
        yield s


@pytest.fixture(scope="module")
def browser():
    if BROWSER is None:
        pytest.skip("no chromium to test the chat page in (apt-get install chromium)")
    b = Browser()
    yield b
    b.close()


def _assistant(browser) -> list[str]:
    return browser.js("[...document.querySelectorAll('.msg.assistant .text')].map(e => e.textContent)")


def test_the_page_streams_what_chat_completions_gives(server, browser):
    browser.open(f"http://127.0.0.1:{server.port}/")
    assert browser.js("[...$('model').options].map(o => o.value)") == ["small", "again"]
    assert browser.js("$('attach').hidden") is True  # a text model takes no images
    for name, value in (("system", SYSTEM), ("temperature", 0), ("max_tokens", 16), ("top_k", 0), ("top_p", 1)):
        browser.set(name, value)
    # count the updates of the reply as it streams
    browser.js("window.updates = 0; new MutationObserver(() => window.updates++).observe($('log'), "
               "{subtree: true, childList: true, characterData: true})")  # fmt: skip
    browser.say("What is the capital of France?")
    browser.wait("document.body.dataset.state === 'idle' && $('status').textContent === 'ready'")
    client = server.client()
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is the capital of France?"}]
    want = client.chat.completions.create(model="small", messages=messages, max_tokens=16, temperature=0)
    first = want.choices[0].message.content
    assert _assistant(browser) == [first]
    assert browser.js("window.updates") > 3  # it came in pieces, not at once
    assert browser.js("document.querySelector('.msg.assistant .note').textContent").endswith(
        f"finished: {want.choices[0].finish_reason}")
    # a second turn carries the first
    browser.say("And of Italy?")
    browser.wait("document.body.dataset.state === 'idle' && document.querySelectorAll('.msg.assistant').length === 2")
    messages += [{"role": "assistant", "content": first}, {"role": "user", "content": "And of Italy?"}]
    want = client.chat.completions.create(model="small", messages=messages, max_tokens=16, temperature=0)
    assert _assistant(browser) == [first, want.choices[0].message.content]


def test_stop_cancels_the_generation_on_the_server(server, browser):
    ask = "Write a very long story about a dragon and a knight."
    ref = server.client().chat.completions.create(model="small", messages=[{"role": "user", "content": ask}],
                                                  max_tokens=300, temperature=0)  # fmt: skip
    assert ref.choices[0].finish_reason == "length"  # left alone, it goes on to the limit
    metrics = server.app.state.server.metrics
    before = metrics.completion_tokens
    browser.open(f"http://127.0.0.1:{server.port}/")
    browser.set("temperature", 0)
    browser.set("max_tokens", 300)
    browser.say(ask)
    browser.wait("(document.querySelector('.msg.assistant .text') || {}).textContent?.length > 10")
    browser.js("$('stop').click()")
    browser.wait("document.body.dataset.state === 'idle'")
    assert browser.js("$('status').textContent") == "stopped"
    assert browser.js("document.querySelector('.msg.assistant .note').textContent") == "stopped"
    deadline = time.time() + 30
    while metrics.running and time.time() < deadline:
        time.sleep(0.05)
    assert metrics.running == 0
    assert 0 < metrics.completion_tokens - before < 300
    shown = _assistant(browser)[0]
    assert ref.choices[0].message.content.startswith(shown)


def test_the_chosen_model_answers(server, browser):
    models = server.app.state.server.models
    assert models.by_id["again"].status == "unloaded"
    browser.open(f"http://127.0.0.1:{server.port}/")
    browser.js("$('model').value = 'again'")
    browser.set("temperature", 0)
    browser.set("max_tokens", 8)
    browser.say("Hello!")
    browser.wait("document.body.dataset.state === 'idle' && $('status').textContent === 'ready'", timeout=180)
    assert models.by_id["again"].status == "ready"
    want = server.client().chat.completions.create(model="again", messages=[{"role": "user", "content": "Hello!"}],
                                                   max_tokens=8, temperature=0)  # fmt: skip
    assert _assistant(browser) == [want.choices[0].message.content]


def test_the_page_is_self_contained(server):
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/", timeout=10) as r:
        policy = r.headers["Content-Security-Policy"]
        html = r.read().decode()
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert "http://" not in html and "https://" not in html  # nothing fetched from elsewhere


def test_an_attached_image_goes_as_an_image_url_part(browser):
    """The tiny random-weight LFM2-VL with its projector: the page offers the image button,
    and its reply to an attached PNG is the server's reply to the same data: URL."""
    import base64

    import cera

    vl = Path(__file__).parents[1] / "models" / "reference"
    image = vl / "data" / "vl" / "gradient.png"
    with cera.load(str(vl / "tiny" / "vl" / "tiny-lfm2-vl.gguf"), device="cpu", threads=2, quiet=True,
                   mmproj=vl / "tiny" / "vl" / "tiny-lfm2-vl-mmproj.gguf") as loaded:  # fmt: skip
        with ServerThread(loaded, aliases=("vl",), parallel=1, n_ctx=1024) as server:
            listed = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{server.port}/v1/models", timeout=10).read())
            assert listed["data"][0]["input_modalities"] == ["text", "image"]
            browser.open(f"http://127.0.0.1:{server.port}/")
            assert browser.js("$('attach').hidden") is False
            root = browser.call("DOM.getDocument")["root"]["nodeId"]
            node = browser.call("DOM.querySelector", nodeId=root, selector="#image")["nodeId"]
            browser.call("DOM.setFileInputFiles", nodeId=node, files=[str(image)])
            browser.wait("$('attached').textContent === 'gradient.png attached'")
            browser.set("temperature", 0)
            browser.set("max_tokens", 12)
            browser.say("What is in it?")
            browser.wait("document.body.dataset.state === 'idle' && $('status').textContent === 'ready'")
            url = "data:image/png;base64," + base64.b64encode(image.read_bytes()).decode()
            content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "What is in it?"}]
            want = server.client().chat.completions.create(
                model="vl", messages=[{"role": "user", "content": content}], max_tokens=12, temperature=0
            )
            assert _assistant(browser) == [want.choices[0].message.content]
            assert browser.js("$('attached').textContent") == ""  # the image went with that message
