"""Several models in one server, by the ids the user gave them: unknown ids are OpenAI-shaped
404s, models load on first request and the least recently used idle one is unloaded when the
memory budget is reached; each model has its own scheduler. Outputs equal a plain session's."""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai", reason="the openai package is not installed (pip install openai)")
pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e ./cera-serve)")

from test_openai_client import ServerThread  # noqa: E402

from cera_serve.models import PREFIX_CACHE_BYTES, model_ids, parse_size  # noqa: E402


def statuses(s) -> dict:
    return {m.id: m.model_extra["status"] for m in s.client().models.list()}


def greedy(loaded, prompt: str, n: int) -> str:
    session = loaded.new_session(n_ctx=256)
    session.append_text(prompt)
    return session.generate(max_tokens=n, temperature=0).text


def test_ids_are_the_given_names_and_others_are_404(loaded):
    with ServerThread(loaded, aliases=("smol",), parallel=2, n_ctx=256) as s:
        client = s.client()
        assert [m.id for m in client.models.list()] == ["smol"]
        r = client.completions.create(model="smol", prompt="The sea is", max_tokens=4, temperature=0)
        assert r.model == "smol" and r.choices[0].text == greedy(loaded, "The sea is", 4)
        for name in ("gpt-4o", "nonexistent", loaded.name):
            with pytest.raises(openai.NotFoundError) as e:
                client.chat.completions.create(model=name, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
            err = e.value.body
            assert err["code"] == "model_not_found" and err["param"] == "model" and repr(name) in err["message"]
            assert "'smol'" in err["message"]  # it says what is served


def test_a_given_model_without_alias_is_named_by_its_file(loaded, smollm2_path):
    with ServerThread(loaded, aliases=(), parallel=1, n_ctx=256) as s:
        assert [m.id for m in s.client().models.list()] == [smollm2_path.stem]
        assert " " not in smollm2_path.stem


def test_two_models_load_on_demand_and_the_idle_one_makes_room(loaded, smollm2_path):
    path = str(smollm2_path)
    one = sum(t.nbytes for t in loaded.gguf.tensors.values()) + PREFIX_CACHE_BYTES
    budget = int(one * 1.5)  # room for one loaded model, not two
    with ServerThread(None, models=(path, path), aliases=("a", "b"), memory_budget=budget, parallel=2, n_ctx=256,
                      device="cpu", threads=1) as s:  # fmt: skip
        client = s.client()
        assert statuses(s) == {"a": "ready", "b": "unloaded"}  # the first loads at start, the others on demand
        want = greedy(loaded, "Once upon a time", 6)
        ra = client.completions.create(model="a", prompt="Once upon a time", max_tokens=6, temperature=0)
        rb = client.completions.create(model="b", prompt="Once upon a time", max_tokens=6, temperature=0)
        assert (ra.model, rb.model) == ("a", "b") and ra.choices[0].text == rb.choices[0].text == want
        assert statuses(s) == {"a": "unloaded", "b": "ready"}  # a was idle and least recently used
        registry = s.app.state.server.models
        b = registry.by_id["b"]
        assert b.scheduler is not None and b.scheduler.loaded is b.loaded and b.nbytes <= budget
        ra = client.completions.create(model="a", prompt="Once upon a time", max_tokens=6, temperature=0)
        assert ra.choices[0].text == want and statuses(s) == {"a": "ready", "b": "unloaded"}


def test_each_model_has_its_own_scheduler(loaded, smollm2_path):
    path = str(smollm2_path)
    with ServerThread(None, models=(path, path), aliases=("a", "b"), memory_budget=2**40, parallel=1, n_ctx=256,
                      device="cpu", threads=1) as s:  # fmt: skip
        client = s.client()
        for name in ("a", "b"):
            client.completions.create(model=name, prompt="hi", max_tokens=1, temperature=0)
        registry = s.app.state.server.models
        a, b = registry.by_id["a"], registry.by_id["b"]
        assert statuses(s) == {"a": "ready", "b": "ready"}
        assert a.scheduler is not b.scheduler and a.loaded is not b.loaded and a.slots is not b.slots


def test_names_and_sizes_are_checked():
    from cera.errors import CeraError

    assert model_ids(["x.gguf", "y"], ["a"]) == ["a", "y"]
    with pytest.raises(CeraError, match="2 aliases for 1 models"):
        model_ids(["x"], ["a", "b"])
    with pytest.raises(CeraError, match="given twice"):
        model_ids(["x", "x"], [])
    assert parse_size("6GiB") == 6 * 2**30 and parse_size("512MB") == 512 * 10**6 and parse_size("100") == 100
    with pytest.raises(CeraError, match="is not a size"):
        parse_size("lots")


def test_the_command_refuses_extra_aliases():
    from click.testing import CliRunner

    from cera_serve.command import serve_cmd

    r = CliRunner().invoke(serve_cmd, ["-m", "a", "--alias", "x", "--alias", "y"])
    assert r.exit_code == 2 and "2 aliases for 1 models" in r.output
    r = CliRunner().invoke(serve_cmd, ["--models-memory", "lots"])
    assert r.exit_code == 2 and "is not a size" in r.output
