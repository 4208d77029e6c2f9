"""``POST /v1/rerank`` (also ``/rerank``) for embedding models: the documents ordered by the
cosine similarity of their embeddings to the query's, in the shape llama.cpp's server and
Jina/Cohere clients use (``results`` of ``index`` and ``relevance_score``, best first;
``top_n``; ``return_documents``).

The scores are those of a bi-encoder: the model embeds the query and each document apart.
A cross-encoder reranker (a model that reads query and document together) scores better,
and is not what this route runs.
"""

from __future__ import annotations

import asyncio

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse


def route(server):
    from cera.errors import CeraError

    from .app import APIError, read_json

    async def rerank(request: Request):
        data = await read_json(request)
        query, documents = data.get("query"), data.get("documents")
        if not isinstance(query, str) or not query:
            raise APIError(400, "'query' must be a non-empty string", param="query")
        if isinstance(documents, list):
            documents = [d.get("text") if isinstance(d, dict) else d for d in documents]
        if not isinstance(documents, list) or not documents or not all(isinstance(d, str) for d in documents):
            raise APIError(400, "'documents' must be a non-empty list of strings", param="documents")
        top_n = data.get("top_n", len(documents))
        if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1:
            raise APIError(400, "'top_n' must be a positive integer", param="top_n")
        model = await server.model(data)
        await model.slot()
        try:
            vectors = await asyncio.get_running_loop().run_in_executor(None, model.loaded.embed, [query, *documents])
        except CeraError as e:
            raise APIError(400, f"model {model.id!r} cannot embed, so it cannot rerank: {e}", code="unsupported") from None
        finally:
            model.release()
        v = np.asarray(vectors, dtype=np.float64)
        v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
        scores = v[1:] @ v[0]
        order = sorted(range(len(documents)), key=lambda i: -scores[i])[:top_n]
        results = []
        for i in order:
            r = {"index": i, "relevance_score": float(scores[i])}
            if data.get("return_documents"):
                r["document"] = {"text": documents[i]}
            results.append(r)
        n_tokens = sum(len(model.loaded.tokenize(t)) for t in [query, *documents])
        return JSONResponse({"object": "list", "model": model.id, "results": results,
                             "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}})  # fmt: skip

    return rerank
