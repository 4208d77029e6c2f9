"""The routes and limits of `cera serve` that test_openai_client.py leaves out: embeddings from
an embedding model (nomic-embed-text, against llama.cpp's stored vectors), Prometheus
metrics (parsed, counting what the responses reported), the request size limit, the
prompt cache shared across requests (tokens equal to a fresh model's without a cache),
``max_completion_tokens``, and /health while a model fails to load."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

openai = pytest.importorskip("openai", reason="the openai package is not installed (pip install openai)")
pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e ./cera-serve)")

from test_openai_client import ServerThread  # noqa: E402 - the serve tests share their server harness

import cera  # noqa: E402

EMBED_REF = Path(__file__).parents[1] / "models" / "reference" / "embeddings" / "nomic-embed-text-v1.5-f16.json"

# a system prompt long enough for the prompt cache (it keeps prefixes of 64 tokens and more)
SYSTEM = (
    "You are a careful assistant for a small bakery. You answer questions about opening hours, "
    "ingredients, allergens, prices and orders. You keep answers short and friendly, you never invent "
    "products the bakery does not sell, and when you do not know something you say so and suggest "
    "calling the shop. The bakery sells sourdough, rye, croissants, cinnamon buns and seasonal tarts.\n\n"
)


@pytest.fixture(scope="module")
def server(loaded):
    with ServerThread(loaded, parallel=2, n_ctx=512) as s:
        yield s


def _post(port: int, path: str, body: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _metrics(port: int) -> dict[str, float]:
    """The exposition text as {'name{labels}': value}, every line checked against the format."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    out = {}
    sample = re.compile(
        r'^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})?) (\S+)$'
    )
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$", line), line
            continue
        m = sample.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        out[m.group(1)] = float(m.group(2))
    return out


def test_metrics_count_requests_and_tokens(server):
    before = _metrics(server.port)
    r = server.client().completions.create(model="x", prompt="The sea is", max_tokens=5, temperature=0)
    after = _metrics(server.port)
    key = 'cera_requests_total{route="/v1/completions",status="200"}'
    assert after[key] - before.get(key, 0) == 1
    assert after["cera_completion_tokens_total"] - before["cera_completion_tokens_total"] == r.usage.completion_tokens
    assert after["cera_prompt_tokens_total"] - before["cera_prompt_tokens_total"] == r.usage.prompt_tokens
    count = 'cera_request_seconds_count{route="/v1/completions"}'
    assert after[count] - before.get(count, 0) == 1
    inf = 'cera_request_seconds_bucket{route="/v1/completions",le="+Inf"}'
    assert after[inf] == after[count]  # the histogram's buckets are cumulative
    assert after["cera_sequences_running"] == 0 and after["cera_requests_waiting"] == 0


def test_a_body_over_the_limit_is_413(server):
    import http.client

    from cera_serve.app import MAX_BODY

    # the server answers from the declared length, before reading the body
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.putrequest("POST", "/v1/completions")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(MAX_BODY + 1))
    conn.endheaders(b'{"prompt": "aaaa')
    r = conn.getresponse()
    body = json.loads(r.read())
    conn.close()
    assert r.status == 413 and f"exceeds the limit of {MAX_BODY}" in body["error"]["message"]
    # a body sent in chunks, with no length declared, is cut off at the limit too
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    chunks = (b"a" * 2**20 for _ in range(MAX_BODY // 2**20 + 1))  # the last chunk crosses the limit
    try:
        conn.request("POST", "/v1/completions", body=chunks, headers={"Content-Type": "application/json"},
                     encode_chunked=True)  # fmt: skip
        r = conn.getresponse()
        status, body = r.status, json.loads(r.read())
    except (BrokenPipeError, ConnectionResetError):
        pytest.fail("the server closed the connection instead of answering 413")
    finally:
        conn.close()
    assert status == 413 and "exceeds the limit" in body["error"]["message"]


def test_max_completion_tokens(server):
    r = server.client().chat.completions.create(model="x", messages=[{"role": "user", "content": "Count to fifty."}],
                                                max_completion_tokens=7, temperature=0)  # fmt: skip
    assert r.usage.completion_tokens == 7 and r.choices[0].finish_reason == "length"


def test_a_shared_prompt_beginning_comes_from_the_prompt_cache(server, loaded, smollm2_path):
    cache = loaded.prefix_cache
    client = server.client()
    client.completions.create(model="x", prompt=SYSTEM + "Q: When do you open?\nA:", max_tokens=4, temperature=0)
    hits = cache.hits
    prompt = SYSTEM + "Q: Do the croissants contain nuts?\nA:"
    r = client.completions.create(model="x", prompt=prompt, max_tokens=16, temperature=0)
    assert cache.hits == hits + 1
    # the same tokens as a fresh model with no cache evaluating the whole prompt
    with cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True) as fresh:
        assert fresh.prefix_cache is None
        s = fresh.new_session(n_ctx=512)
        s.append_text(prompt)
        assert r.choices[0].text == s.generate(max_tokens=16, temperature=0).text


def test_health_reports_a_failed_load():
    from cera_serve.app import ServerConfig, create_app
    from starlette.testclient import TestClient

    app = create_app(ServerConfig(model="/nonexistent/model.gguf", device="cpu"))
    with TestClient(app) as client:
        r = client.get("/health")
        assert r.status_code == 503 and r.json()["status"] == "failed" and "nonexistent" in r.json()["error"]
        r = client.post("/v1/completions", json={"prompt": "hi"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "load_failed"


def test_embeddings_from_an_embedding_model_match_llama_cpp():
    from cera.sources import bundles

    record = json.loads(EMBED_REF.read_text())
    cases = record["cases"]
    nomic = cera.load(str(bundles.fetch_file("nomic-embed-text-v1.5-f16", quiet=True)), device="cpu", threads=2,
                      quiet=True)  # fmt: skip
    try:
        with ServerThread(nomic, parallel=2, n_ctx=512) as s:
            r = s.client().embeddings.create(model="x", input=[c["text"] for c in cases])
    finally:
        nomic.close()
    got = np.array([d.embedding for d in sorted(r.data, key=lambda d: d.index)])
    want = np.array([c["embedding"] for c in cases])
    cos = (got * want).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    assert got.shape == want.shape and cos.min() >= 0.9999, np.round(cos, 6).tolist()
    assert r.usage.prompt_tokens == sum(len(c["tokens"]) for c in cases)
