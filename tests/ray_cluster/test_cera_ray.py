"""cera-ray on a local Ray cluster that the test starts (``ray.init``, 2 CPUs): the Ray Serve
deployment answers the official `openai` client (greedy tokens equal to llama.cpp's stored
ones, streaming equal to non-streaming, OpenAI-shaped errors, an API key, two replicas), and
Ray Data generates and embeds over a dataset (greedy rows equal to llama.cpp's tokens, chat
rows through the template, embeddings equal to the model's own in-process vectors)."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e ./cera-ray, which needs ray[serve,data])")
pytest.importorskip("ray.serve", reason="Ray Serve is not installed (pip install 'ray[serve]')")
pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install 'ray[data]')")
openai = pytest.importorskip("openai", reason="the openai package is not installed (pip install openai)")

import cera_ray  # noqa: E402
from cera_ray import ModelSpec, RayConfigError  # noqa: E402

import cera  # noqa: E402

REF = Path(__file__).parents[1] / "models" / "reference" / "data" / "smollm2-135m-instruct-q4_1.json"


@pytest.fixture(scope="module")
def reference():
    return {c["id"]: c for c in json.loads(REF.read_text())["cases"]}


@pytest.fixture(scope="module")
def cluster():
    import os

    # no usage report to Ray's servers from a test (the machines reach no such host anyway)
    before = os.environ.get("RAY_USAGE_STATS_ENABLED")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    # address="local": always a fresh cluster of this process, never one found running
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    from ray import serve

    serve.shutdown()
    ray.shutdown()
    if before is None:
        os.environ.pop("RAY_USAGE_STATS_ENABLED", None)
    else:
        os.environ["RAY_USAGE_STATS_ENABLED"] = before


@pytest.fixture(scope="module")
def spec(smollm2_path):
    return ModelSpec(model=str(smollm2_path), device="cpu", threads=1, parallel=4, n_ctx=512)


@pytest.fixture(scope="module")
def http_port(cluster):
    from ray import serve

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    return port


def _client(port: int, prefix: str = "", key: str = "none"):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}{prefix}/v1", api_key=key, max_retries=0, timeout=120)


def test_spec_and_builder_arguments_are_checked():
    with pytest.raises(RayConfigError, match="parallel must be a positive integer"):
        ModelSpec(model="m", parallel=0)
    with pytest.raises(RayConfigError, match=r"unknown model setting\(s\) \['ctx'\]"):
        ModelSpec.of({"model": "m", "ctx": 5})
    with pytest.raises(RayConfigError, match="parallel must be an integer, got 'many'"):
        cera_ray.build({"model": "m", "parallel": "many"})
    with pytest.raises(RayConfigError, match=r"unknown argument\(s\) \['colour'\]"):
        cera_ray.build({"model": "m", "colour": "blue"})
    with pytest.raises(RayConfigError, match="max_queue must be an integer"):
        cera_ray.deployment("m", max_queue=-1)
    with pytest.raises(RayConfigError, match="on_error must be"):
        cera_ray.Generate("m", on_error="ignore")


# Ray Serve's proxy actor was killed during setup (ActorDiedError) in a fresh clone's suite on a
# loaded 2-core machine: slow until that is understood; the Ray Data tests stay in the default run
@pytest.mark.slow
def test_ray_serve_replica_speaks_openai(cluster, http_port, spec, reference):
    from ray import serve

    # through the builder Ray's `serve run` and config files use: every argument a string
    args = {"model": spec.model, "device": "cpu", "threads": "1", "parallel": "4", "n_ctx": "512"}
    serve.run(cera_ray.build(args), name="cera", route_prefix="/", blocking=False)
    _wait_running("cera")
    client = _client(http_port)
    assert [m.id for m in client.models.list()] == [spec.model]
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/health") as r:
        assert json.loads(r.read()) == {"status": "ready"}

    # greedy tokens through Ray's proxy equal llama.cpp's, as far as llama.cpp is confident
    case = reference["code_py_sort"]
    n = case["first_step_margin_below_0_5"]
    r = client.completions.create(model="x", prompt=case["prompt_tokens"], max_tokens=n, temperature=0)
    with cera.load(spec.model, device="cpu", threads=1, quiet=True) as loaded:
        assert r.choices[0].text == loaded.detokenize(case["generated_tokens"][:n])
    assert r.usage.completion_tokens == n and r.choices[0].finish_reason == "length"

    # server-sent events pass through Ray's proxy: the stream adds up to the whole reply
    chat = reference["chat_capital"]
    full = client.chat.completions.create(model="x", messages=chat["messages"], max_tokens=16, temperature=0)
    parts = []
    for chunk in client.chat.completions.create(model="x", messages=chat["messages"], max_tokens=16, temperature=0,
                                                stream=True):  # fmt: skip
        parts += [c.delta.content for c in chunk.choices if c.delta.content]
    assert "".join(parts) == full.choices[0].message.content == chat["generated_text"].removesuffix("<|im_end|>")
    assert full.choices[0].finish_reason == "stop"

    # errors keep OpenAI's shape through the proxy
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="x", messages=chat["messages"], max_tokens=100000)
    assert "context holds 512" in str(info.value)

    # a client that goes away mid-stream: Ray's proxy cancels the request in the replica, and
    # the server stops the sequence (its metrics, read through the proxy, show none running)
    stream = client.completions.create(model="x", prompt="Count to a thousand:", max_tokens=400, temperature=0,
                                       stream=True, extra_body={"ignore_eos": True})  # fmt: skip
    it = iter(stream)
    for _ in range(3):
        next(it)
    stream.close()
    deadline = time.time() + 30
    while time.time() < deadline and _gauge(http_port, "cera_sequences_running") != 0:
        time.sleep(0.2)
    assert _gauge(http_port, "cera_sequences_running") == 0
    assert _gauge(http_port, "cera_completion_tokens_total") < 2 * n + 16 + 200  # far from the 400 asked for
    serve.delete("cera")


def _gauge(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{name} is not in /metrics")


# Ray Serve's proxy actor was killed during setup (ActorDiedError) in a fresh clone's suite on a
# loaded 2-core machine: slow until that is understood; the Ray Data tests stay in the default run
@pytest.mark.slow
def test_two_replicas_behind_an_api_key_answer_concurrent_clients(cluster, http_port, spec, reference):
    from ray import serve

    half = {"num_cpus": 0.5}  # two replicas fit beside the proxy and controller on 2 CPUs
    serve.run(cera_ray.app(spec, api_key="s3cret", num_replicas=2, ray_actor_options=half), name="secure",
              route_prefix="/secure", blocking=False)  # fmt: skip
    _wait_running("secure", replicas=2)
    with pytest.raises(openai.AuthenticationError):
        _client(http_port, "/secure", "wrong").models.list()
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/secure/health") as r:
        assert r.status == 200  # /health needs no key

    cases = [reference[k] for k in ("code_py_sort", "num_primes", "num_count", "math_qa")]
    n = min(c["first_step_margin_below_0_5"] or 32 for c in cases)
    got: list = [None] * 8

    def work(i):
        r = _client(http_port, "/secure", "s3cret").completions.create(
            model="x", prompt=cases[i % 4]["prompt_tokens"], max_tokens=n, temperature=0
        )
        got[i] = r.choices[0].text

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    with cera.load(spec.model, device="cpu", threads=1, quiet=True) as loaded:
        assert got == [loaded.detokenize(cases[i % 4]["generated_tokens"][:n]) for i in range(8)]
    serve.delete("secure")


# Slow too: the stop before this one timed out in CI (a test hung with no trace in what CI
# printed, and no run here reproduced it); a local Ray cluster is the part of the suite most
# tied to the machine it starts on, so the default run starts none.
@pytest.mark.slow
def test_ray_data_generates_every_row_as_alone(cluster, spec, reference):
    # token-id prompts: each row's greedy text equals llama.cpp's tokens
    cases = [reference[k] for k in ("code_py_sort", "num_primes", "num_count", "math_qa", "code_sql")]
    n = min(c["first_step_margin_below_0_5"] or 32 for c in cases)
    ds = ray.data.from_items([{"id": c["id"], "prompt": c["prompt_tokens"]} for c in cases])
    rows = cera_ray.generate(ds, spec, batch_size=3, max_tokens=n, temperature=0).take_all()
    with cera.load(spec.model, device="cpu", threads=1, quiet=True) as loaded:
        want = {c["id"]: loaded.detokenize(c["generated_tokens"][:n]) for c in cases}
    assert {r["id"]: r["generated_text"] for r in rows} == want
    assert all(r["finish_reason"] == "length" and r["completion_tokens"] == n for r in rows)

    # chat rows go through the model's template; a row too long for the context is recorded
    chat = reference["chat_capital"]
    ds = ray.data.from_items([{"prompt": chat["messages"][1]["content"]}, {"prompt": "word " * 600}])
    rows = ds.map_batches(cera_ray.Generate, fn_constructor_kwargs={
        "spec": spec, "chat": True, "system": chat["messages"][0]["content"], "on_error": "record",
        "max_tokens": 16, "temperature": 0}, concurrency=1, batch_size=2).take_all()  # fmt: skip
    assert rows[0]["generated_text"] == chat["generated_text"].removesuffix("<|im_end|>")
    assert rows[0]["finish_reason"] == "stop" and rows[0]["error"] == ""
    assert rows[1]["finish_reason"] == "error" and "512" in rows[1]["error"] and rows[1]["generated_text"] == ""

    # ... and by default fails the job, naming the row
    with pytest.raises(Exception, match="row 0 of the batch"):
        cera_ray.generate(ray.data.from_items([{"prompt": "word " * 600}]), spec, max_tokens=4).take_all()


@pytest.mark.slow
def test_ray_data_embeds_as_the_model_does(cluster, spec):
    import numpy as np

    texts = ["a cat sat on the mat", "quantum field theory", "a kitten sat on a rug", "tax law"]
    rows = cera_ray.embed(ray.data.from_items([{"text": t} for t in texts]), spec, batch_size=3).take_all()
    with cera.load(spec.model, device="cpu", threads=1, quiet=True) as loaded:
        want = loaded.embed(texts)
    got = np.stack([r["embedding"] for r in sorted(rows, key=lambda r: texts.index(r["text"]))])
    assert got.shape == want.shape and np.allclose(got, want, atol=1e-5)


def _wait_running(name: str, replicas: int = 1, timeout: float = 180) -> None:
    from ray import serve

    deadline = time.time() + timeout
    while time.time() < deadline:
        app = serve.status().applications.get(name)
        if app is not None and app.status == "RUNNING":
            dep = next(iter(app.deployments.values()))
            if dep.replica_states.get("RUNNING", 0) >= replicas:
                return
        if app is not None and app.status == "DEPLOY_FAILED":
            raise AssertionError(f"the {name} application failed to deploy: {app.message}")
        time.sleep(0.5)
    raise AssertionError(f"the {name} application was not running after {timeout} s: {serve.status()}")
