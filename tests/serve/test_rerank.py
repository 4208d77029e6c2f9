"""``/v1/rerank`` on an embedding model (nomic-embed-text-v1.5): the documents ordered and
scored by the cosine similarity of llama.cpp's stored embeddings of the query and each
document; ``top_n`` and ``return_documents``; a refusal for bad bodies."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("openai", reason="the openai package is not installed (pip install openai)")
pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e ./cera-serve)")

from test_openai_client import ServerThread  # noqa: E402 - the serve tests share their server harness

import cera  # noqa: E402

EMBED_REF = Path(__file__).parents[1] / "models" / "reference" / "embeddings" / "nomic-embed-text-v1.5-f16.json"


def post(s, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{s.port}/v1/rerank", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_rerank_orders_by_llama_cpps_embeddings():
    from cera.sources import bundles

    cases = json.loads(EMBED_REF.read_text())["cases"]
    query, docs = cases[0], cases[1:7]
    q = np.array(query["embedding"])
    d = np.array([c["embedding"] for c in docs])
    want = (d @ q) / (np.linalg.norm(d, axis=1) * np.linalg.norm(q))
    nomic = cera.load(str(bundles.fetch_file("nomic-embed-text-v1.5-f16", quiet=True)), device="cpu", threads=2,
                      quiet=True)  # fmt: skip
    try:
        with ServerThread(nomic, parallel=1, n_ctx=512) as s:
            status, r = post(s, {"model": "x", "query": query["text"], "documents": [c["text"] for c in docs],
                                 "top_n": 3, "return_documents": True})  # fmt: skip
            assert status == 200, r
            assert [x["index"] for x in r["results"]] == list(np.argsort(-want)[:3])
            assert r["results"][0]["index"] == 0  # the passage about Paris answers the question about France
            got = np.array([x["relevance_score"] for x in r["results"]])
            assert np.abs(got - want[[x["index"] for x in r["results"]]]).max() < 1e-3
            assert r["results"][0]["document"]["text"] == docs[0]["text"]
            status, r = post(s, {"model": "x", "query": "q", "documents": []})
            assert status == 400 and r["error"]["param"] == "documents"
            status, r = post(s, {"model": "other", "query": "q", "documents": ["a"]})
            assert status == 404 and r["error"]["code"] == "model_not_found"
    finally:
        nomic.close()
