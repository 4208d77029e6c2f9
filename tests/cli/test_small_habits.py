"""Small things a newcomer notices: a hint never sends the reader to the command that printed
it, every bundle has a size before it is fetched, `cera bench --json` says the thread
count it ran with, a download bar counts in the units the summaries use, and the prompt
rate counts only the tokens evaluated (not those a prompt cache restored)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def cera(*args, env=None):
    run_env = dict(os.environ)
    run_env.pop("CERA_PLUGINS", None)
    run_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "cera_cli.main", *map(str, args)], capture_output=True, text=True,
                          timeout=600, env=run_env)  # fmt: skip


def test_cera_plugins_does_not_point_at_itself():
    r = cera("plugins")
    assert r.returncode == 0, r.stderr
    assert "`cera plugins`" not in r.stdout + r.stderr, r.stdout


def test_bundles_list_offline_does_not_point_at_itself(tmp_path):
    r = cera("bundles", "list", env={"HF_ENDPOINT": "http://127.0.0.1:9", "CERA_HUB_TIMEOUT": "2",
                                     "HF_HOME": str(tmp_path)})  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "not listed" in r.stderr  # the Hub was unreachable: the note is there
    assert "`cera bundles list`" not in r.stderr, r.stderr


def test_every_bundle_has_a_size_before_it_is_fetched(tmp_path):
    r = cera("models", "--json", env={"CERA_CACHE_DIR": str(tmp_path)})  # an empty cache: nothing fetched
    assert r.returncode == 0, r.stderr
    sizes = {b["name"]: b["size"] for b in json.loads(r.stdout)}
    assert all(isinstance(s, int) and s > 0 for s in sizes.values()), sizes
    r = cera("models", env={"CERA_CACHE_DIR": str(tmp_path)})
    assert " ? " not in r.stdout


def test_bench_json_says_the_threads(smollm2_path):
    r = cera("bench", "-m", smollm2_path, "-p", "8", "-n", "2", "-r", "1", "--device", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert isinstance(doc["threads"], int) and doc["threads"] >= 1
    r = cera("bench", "-m", smollm2_path, "-p", "8", "-n", "2", "-r", "1", "--device", "cpu", "-t", "1", "--json")
    assert json.loads(r.stdout)["threads"] == 1


def test_the_download_bar_counts_in_mb_as_the_summaries(capsys):
    pytest.importorskip("tqdm")
    from cera.sources import hub
    from cera_cli.commands.models import human_size

    os.environ.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    bar = hub._progress("model.gguf", 98_366_528, 0, quiet=False)
    bar.update(98_366_528)
    shown = str(bar)
    bar.close()
    assert human_size(98_366_528) == "98.4 MB"
    assert "98.4M" in shown and "93.8M" not in shown, shown  # decimal megabytes, not MiB


def test_the_prompt_rate_counts_only_evaluated_tokens(smollm2_path, tmp_path):
    import cera as cera_api

    loaded = cera_api.load(smollm2_path, device="cpu", threads=2, quiet=True)
    try:
        loaded.enable_prefix_cache()
        prompt = "The history of the lighthouse on the rocky point, told by its last keeper: " * 6  # over the cache's 64-token minimum
        first = loaded.new_session(n_ctx=512)
        first.append_text(prompt)
        a = first.generate(max_tokens=2, temperature=0)
        second = loaded.new_session(n_ctx=512)
        n = len(second.append_text(prompt))
        before = second.n_evaluated
        b = second.generate(max_tokens=2, temperature=0)
        evaluated = second.n_evaluated - before - (b.n_generated - 1)
    finally:
        loaded.close()
    assert a.n_prompt_tokens == n
    assert b.n_prompt_tokens == evaluated < n  # the cached prefix was not evaluated, and is not counted
