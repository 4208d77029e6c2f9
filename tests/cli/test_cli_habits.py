"""The command line as people arrive at it: llama.cpp's, ollama's and the `llm` CLI's habits,
and the errors they used to end in. Each test runs the installed command in a
fresh process, as a user would, and reads what it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest


def cera(*args, stdin: str | None = None, env: dict | None = None, timeout: int = 300):
    run_env = dict(os.environ)
    run_env.pop("CERA_PLUGINS", None)
    run_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "cera_cli.main", *map(str, args)],
        input=stdin, capture_output=True, text=True, timeout=timeout, env=run_env,
    )  # fmt: skip


@pytest.fixture(scope="module")
def silero_gguf_path(silero_onnx_path, tmp_path_factory):
    from cera_audio_vad.convert import convert

    return convert(silero_onnx_path, tmp_path_factory.mktemp("vad") / "silero-vad.gguf")


def no_traceback(r):
    assert "Traceback" not in r.stderr, r.stderr


# -- reproductions ------------------------------------------------------------------------


def test_seed_minus_one_is_random_and_printed_so_the_run_can_be_repeated(smollm2_path):
    m = str(smollm2_path)
    first = cera("run", "-m", m, "--raw", "--seed", "-1", "-n", "12", "--temp", "1.0", "-p", "Once upon a time")
    assert first.returncode == 0, first.stderr
    no_traceback(first)
    seeds = re.findall(r"; seed (\d+);", first.stderr)
    assert len(seeds) == 1, first.stderr
    again = cera("run", "-m", m, "--raw", "--seed", seeds[0], "-n", "12", "--temp", "1.0", "-p", "Once upon a time")
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    assert f"; seed {seeds[0]};" in again.stderr


def test_greedy_runs_say_greedy_instead_of_a_seed(smollm2_path):
    r = cera("run", "-m", smollm2_path, "--temp", "0", "-n", "3", "-p", "hi")
    assert r.returncode == 0, r.stderr
    assert "; greedy;" in r.stderr and "seed" not in r.stderr


def test_placeholder_backends_are_not_announced_on_every_run(smollm2_path):
    from cera.plugins.manager import get_manager

    placeholders = [n for n, s in get_manager().backends.items() if s.placeholder]
    if not placeholders:
        pytest.skip("no placeholder backend is installed (cera-backend-metal/-hexagon)")
    r = cera("run", "-m", smollm2_path, "--temp", "0", "-n", "2", "-p", "hi")
    assert r.returncode == 0, r.stderr
    assert "not implemented" not in r.stderr
    for name in placeholders:
        assert f"{name}:" not in r.stderr, r.stderr
    verbose = cera("run", "-m", smollm2_path, "--temp", "0", "-n", "2", "-p", "hi", "--verbose")
    for name in placeholders:  # still there for whoever asks
        assert f"backend {name!r} passed over: not implemented" in verbose.stderr, verbose.stderr


@pytest.mark.parametrize(
    "device, expected, refused",
    [
        ("cuda", "cera's backends are cpu, vulkan, metal, hexagon", "cera-backend-cuda"),
        ("cpu:0", "`--device` takes a backend name (cpu), not a device index", "cera-backend-cpu:0"),
    ],
)
def test_device_hints_name_only_distributions_that_exist(device, expected, refused):
    r = cera("run", "--device", device, "-p", "hi", "-n", "1")
    assert r.returncode == 1
    assert expected in r.stderr, r.stderr
    assert refused not in r.stderr and "pip install" not in r.stderr


def test_no_plugins_does_not_say_install_what_is_installed(smollm2_path):
    r = cera("--no-plugins", "run", "-m", smollm2_path, "-p", "hi", "-n", "1")
    assert r.returncode == 1
    assert "cera-model-llama is installed, but plugins are disabled" in r.stderr, r.stderr
    assert "pip install" not in r.stderr


@pytest.mark.parametrize("where", ["before", "after"])
def test_no_plugins_stands_before_or_after_the_command(smollm2_path, where):
    """`cera run --no-plugins ...` used to be "No such option"; both places must disable the
    plugins, and the hints must say the installed distributions are only disabled."""
    args = ["run", "-m", smollm2_path, "-p", "hi", "-n", "1"]
    r = cera(*(["--no-plugins", *args] if where == "before" else [*args[:1], "--no-plugins", *args[1:]]))
    assert r.returncode == 1
    assert "No such option" not in r.stderr
    assert "cera-model-llama is installed, but plugins are disabled" in r.stderr, r.stderr
    p = cera("plugins", "--no-plugins")
    assert p.returncode == 0 and p.stdout.startswith("No plugins loaded: plugins are disabled"), p.stdout + p.stderr
    i = cera("inspect", "-m", smollm2_path, "--no-plugins")
    assert i.returncode == 0, i.stderr
    assert "cera-backend-cpu is installed, but plugins are disabled" in i.stdout and "pip install" not in i.stdout
    b = cera("bundles", "list", "--local", "--no-plugins")
    assert b.returncode == 0 and "smollm2-135m-instruct" in b.stdout, b.stderr


def test_every_registered_architecture_has_its_distribution_in_the_hint_table():
    """The install hints (cera.plugins.distributions.FAMILIES) must know every architecture the
    installed families register, or a file of that architecture under --no-plugins (or with
    its family missing) is told "no distribution of cera serves it yet"."""
    from cera.plugins.distributions import FAMILIES
    from cera.plugins.manager import PluginManager

    m = PluginManager()
    m.load_entry_points()
    assert m.architectures, "no family plugin loaded"
    missing = {}
    for arch, family in m.architectures.items():
        plugin = m.plugin_of("family", family.name)
        dist = next((r.distribution for r in m.records if r.name == plugin), None)
        if dist and dist.startswith("cera-model-") and FAMILIES.get(arch) != dist:
            missing[arch] = dist
    assert not missing, f"add to cera.plugins.distributions.FAMILIES: {missing}"


def test_a_vad_gguf_under_run_says_it_is_a_vad(silero_gguf_path):
    r = cera("run", "-m", silero_gguf_path, "-p", "hi")
    assert r.returncode == 1
    assert "voice activity detector" in r.stderr and "cera vad --model FILE" in r.stderr, r.stderr
    assert "pip install" not in r.stderr and "cera-models" not in r.stderr


@pytest.mark.parametrize("name, kind", [("silero-vad", "vad"), ("llama.cpp-vocab", "test-data")])
def test_bundles_that_are_not_language_models_are_refused_by_name(name, kind):
    r = cera("run", "-m", name, "-p", "hi")
    assert r.returncode == 1
    assert f"-m/--model {name}: that bundle is" in r.stderr and f"({kind}), not a language model" in r.stderr, r.stderr
    assert "fetch()" not in r.stderr


def test_an_unknown_model_lists_only_bundles_that_run():
    r = cera("run", "-m", "no-such-model-name", "-p", "hi")
    assert r.returncode == 1
    no_traceback(r)
    assert "silero-vad" not in r.stderr and "llama.cpp-vocab" not in r.stderr


def test_the_readme_completion_line_continues_the_text(smollm2_path):
    """The README's "stream a completion" line: raw text, not a chat reply."""
    r = cera("run", "-m", smollm2_path, "--raw", "-p", "Once upon a time", "-n", "8", "--temp", "0")
    assert r.returncode == 0, r.stderr
    import cera as cera_lib

    with cera_lib.load(smollm2_path, device="cpu", quiet=True) as model:
        expected = model.generate("Once upon a time", max_tokens=8, temperature=0)
    assert r.stdout == expected + "\n"


@pytest.mark.parametrize(
    "args, flag, message",
    [
        (["-n", "-5"], "'-n' / '--max-tokens' / '--n-predict'", "use -1 for no limit"),
        (["--temp", "-1"], "'--temp' / '--temperature'", "x>=0"),
        (["--stop", ""], "'--stop'", "empty stop string"),
        (["--repeat-last-n", "-2"], "'--repeat-last-n'", "x>=-1"),
        (["--seed", "-2"], "'-s' / '--seed'", "x>=-1"),
    ],
)
def test_bad_generation_values_name_the_flag(args, flag, message):
    r = cera("run", "-p", "hi", *args)
    assert r.returncode == 2
    assert flag in r.stderr and message in r.stderr, r.stderr


def test_bench_refuses_a_context_size_it_would_ignore():
    r = cera("bench", "-c", "64", "-p", "8", "-n", "2", "-r", "1")
    assert r.returncode == 2
    assert "'-c' / '--ctx-size'" in r.stderr and "-p/--n-prompt" in r.stderr


@pytest.mark.parametrize("flag", ["-n", "-p", "-d"])
def test_bench_refuses_negative_counts(flag):
    r = cera("bench", flag, "-5", "-r", "1")
    assert r.returncode == 2
    assert "counts are 0 or more (0 skips these tests), got -5" in r.stderr, r.stderr


def test_a_prompt_longer_than_the_context_names_the_flag(smollm2_path):
    r = cera("run", "-m", smollm2_path, "-c", "16", "-p", "word " * 40)
    assert r.returncode == 2
    no_traceback(r)
    assert "the context holds 16: raise -c/--ctx-size" in r.stderr, r.stderr
    assert "n_ctx" not in r.stderr and "new session" not in r.stderr


@pytest.mark.parametrize("command", ["run", "chat"])
def test_a_context_too_large_for_memory_names_the_flag(smollm2_path, command):
    r = cera(command, "-m", smollm2_path, "-c", "999999999", "-n", "1", stdin="hi\n")
    assert r.returncode == 1
    no_traceback(r)
    assert "lower -c/--ctx-size (now 999999999)" in r.stderr, r.stderr


def test_spec_with_the_default_temperature_names_the_flag():
    r = cera("run", "--spec", "-p", "hi", "-n", "2")
    assert r.returncode == 2
    assert "--spec gives exactly the greedy output: it needs --temp 0" in r.stderr, r.stderr


def test_a_cut_generation_says_so_in_flags(smollm2_path):
    r = cera("run", "-m", smollm2_path, "--raw", "-c", "24", "-n", "-1", "--ignore-eos", "--temp", "0", "-p", "Once upon a time")
    assert r.returncode == 0, r.stderr
    assert "stop: context" in r.stderr
    assert "the context (24 tokens) is full: the text was cut; raise -c/--ctx-size" in r.stderr


def test_vad_errors_name_the_flag(silero_gguf_path):
    from pathlib import Path

    audio = Path(__file__).parents[1] / "audio" / "data" / "speech_16k.flac"
    r = cera("vad", "--model", silero_gguf_path, "--audio", audio, "--min-speech-ms", "-5")
    assert r.returncode == 1
    assert "--min-speech-ms must be a number >= 0" in r.stderr and "min_speech_duration_ms" not in r.stderr


def test_inspect_takes_what_run_takes(smollm2_path, tmp_path):
    folder = tmp_path / "one"
    folder.mkdir()
    (folder / "model.gguf").symlink_to(smollm2_path)
    r = cera("inspect", "-m", folder)
    assert r.returncode == 0, r.stderr
    assert "llama" in r.stdout


# -- habits -------------------------------------------------------------------------------


def test_positional_prompt_file_and_stdin_give_the_same_text(smollm2_path, tmp_path):
    m = str(smollm2_path)
    base = ("run", "-m", m, "--raw", "-n", "6", "--temp", "0", "-q")
    positional = cera(*base, "Once upon a", "time")
    assert positional.returncode == 0, positional.stderr
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Once upon a time")
    from_file = cera(*base, "-f", prompt)
    from_stdin = cera(*base, stdin="Once upon a time")
    from_p = cera(*base, "-p", "Once upon a time")
    assert positional.stdout == from_file.stdout == from_stdin.stdout == from_p.stdout
    assert positional.stdout.strip()
    both = cera(*base, "-p", "x", "y")
    assert both.returncode == 2 and "give the prompt once" in both.stderr


def test_llama_cpp_spellings(smollm2_path):
    r = cera("run", "-m", smollm2_path, "--raw", "--n-predict", "5", "--temperature", "0", "--ctx-size", "64",
             "--top-k", "40", "--top-p", "0.9", "--min-p", "0.05", "--repeat-penalty", "1.1", "-s", "7", "-ngl", "99",
             "-p", "Once upon a time")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "generated 5 tokens" in r.stderr
    assert "-ngl 99 has no effect: the model runs on the CPU backend" in r.stderr


def test_quiet_prints_only_the_text_and_verbose_prints_phases(smollm2_path):
    quiet = cera("run", "-m", smollm2_path, "--temp", "0", "-n", "3", "-q", "-ngl", "1", "-p", "hi")
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout.strip()
    verbose = cera("run", "-m", smollm2_path, "--temp", "0", "-n", "3", "-v", "-p", "hi")
    assert verbose.returncode == 0, verbose.stderr
    phases = re.search(r"phases: resolve ([\d.]+) s, load ([\d.]+) s, prompt ([\d.]+) s, generate ([\d.]+) s", verbose.stderr)
    assert phases, verbose.stderr
    assert float(phases.group(2)) > 0
    assert "chat mode (the file has a chat template" in verbose.stderr
    both = cera("run", "-q", "-v", "-p", "hi")
    assert both.returncode == 2 and "contradict" in both.stderr


def test_version_lists_the_installed_distributions():
    from importlib import metadata

    r = cera("--version")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[0] == f"cera {metadata.version('cera-cli')}"
    for dist in ("cera-core", "cera-cli", "cera-backend-cpu", "cera-model-llama"):
        assert f"  {dist} {metadata.version(dist)}" in lines, r.stdout
