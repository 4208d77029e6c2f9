"""`cera chat` as people use it: a full context drops the oldest exchanges (or shifts)
instead of ending the conversation, /system /clear /save /load, and, in a terminal (a
pty), Ctrl-C stops the reply and returns to the prompt, the up arrow recalls the last line,
Ctrl-D quits."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest


def chat(model, *args, stdin: str, env: dict | None = None):
    run_env = dict(os.environ)
    run_env.pop("CERA_PLUGINS", None)
    run_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "cera_cli.main", "chat", "-m", str(model), *map(str, args)],
        input=stdin, capture_output=True, text=True, timeout=300, env=run_env,
    )  # fmt: skip


def test_a_full_context_drops_the_oldest_exchanges_instead_of_exiting(smollm2_path):
    """The issue's reproduction: three questions in a 96-token context."""
    r = chat(smollm2_path, "--temp", "0", "-n", "30", "-c", "96",
             stdin="Tell me about cats.\nTell me about dogs.\nTell me about birds.\n")  # fmt: skip
    assert r.returncode == 0, r.stderr
    replies = r.stdout.strip().splitlines()
    assert len(replies) == 3 and all(replies), r.stdout
    assert "Dogs" in replies[1] and "Birds" in replies[2]
    assert r.stderr.count("generated at") == 3
    assert ("the context (96 tokens) is full: dropped the 1 oldest exchange ('Tell me about cats.') to make room "
            "(1 so far)") in r.stderr
    assert "(2 so far)" in r.stderr
    assert "raise -c/--ctx-size" in r.stderr and "n_ctx" not in r.stderr


def test_context_shift_keeps_writing_past_a_full_context(smollm2_path):
    r = chat(smollm2_path, "--temp", "0", "-n", "120", "--ignore-eos", "-c", "96", "--context-shift",
             stdin="Tell me about cats.\n")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert re.search(r"--context-shift dropped \d+ of the oldest tokens during the reply", r.stderr), r.stderr
    assert "120 generated" in r.stderr


def test_a_message_too_long_for_the_context_is_refused_and_the_chat_goes_on(smollm2_path):
    r = chat(smollm2_path, "--temp", "0", "-n", "8", "-c", "64", stdin="word " * 80 + "\nHi!\n")
    assert r.returncode == 0, r.stderr
    assert "but the context holds 64: raise -c/--ctx-size" in r.stderr
    assert r.stderr.count("generated at") == 1  # the second message was answered


def test_system_clear_save_and_load(smollm2_path, tmp_path):
    saved = tmp_path / "talk.cera"
    script = "\n".join([
        "/system You are a pirate. Answer in pirate speak.",
        "/system",
        "Who are you?",
        f"/save {saved}",
        "/clear",
        "/system",
        f"/load {saved}",
        "/system",
        "/nonsense",
        "/exit",
        "never read",
    ]) + "\n"  # fmt: skip
    r = chat(smollm2_path, "--temp", "0", "-n", "12", stdin=script)
    assert r.returncode == 0, r.stderr
    assert "cera: system message: You are a pirate. Answer in pirate speak." in r.stderr
    assert f"saved the conversation (2 messages, 1 exchange) to {saved}" in r.stderr
    assert saved.exists()
    assert "conversation cleared" in r.stderr
    # /clear keeps the system message; /load brings the conversation back, evaluated
    assert r.stderr.count("cera: system message: You are a pirate.") == 3
    assert re.search(rf"loaded {re.escape(str(saved))}: 2 messages, 1 exchange, \d+ tokens evaluated", r.stderr), r.stderr
    assert "unknown command /nonsense; /help lists them" in r.stderr
    assert r.stderr.count("generated at") == 1  # nothing after /exit


def test_load_continues_where_save_left_off_in_another_process(smollm2_path, tmp_path):
    saved = tmp_path / "talk.cera"
    first = chat(smollm2_path, "--temp", "0", "-n", "10", stdin=f"My name is Ada.\n/save {saved}\n")
    assert first.returncode == 0, first.stderr
    second = chat(smollm2_path, "--temp", "0", "-n", "10", stdin=f"/load {saved}\nWhat is my name?\n")
    assert second.returncode == 0, second.stderr
    # the whole saved conversation is reused from the file: only the new turn is evaluated
    m = re.search(r"\[(\d+) new prompt tokens \((\d+) reused\)", second.stderr)
    assert m and int(m.group(2)) > 20, second.stderr
    bad = chat(smollm2_path, "--temp", "0", "-n", "4", stdin=f"/load {tmp_path / 'missing.cera'}\nHi\n")
    assert bad.returncode == 0 and "cannot load" in bad.stderr and bad.stderr.count("generated at") == 1


def test_load_takes_the_context_size_the_file_was_saved_with(smollm2_path, tmp_path):
    saved = tmp_path / "talk.cera"
    first = chat(smollm2_path, "--temp", "0", "-n", "6", "-c", "256", stdin=f"Hello.\n/save {saved}\n")
    assert first.returncode == 0, first.stderr
    second = chat(smollm2_path, "--temp", "0", "-n", "6", "-c", "512", stdin=f"/load {saved}\nAgain.\n")
    assert second.returncode == 0, second.stderr
    assert "was saved with -c 256 --kv-type f16; continuing with those" in second.stderr


# -- in a terminal --------------------------------------------------------------------------


def test_ctrl_c_stops_the_reply_history_recalls_the_line_and_ctrl_d_quits(smollm2_path, tmp_path):
    pexpect = pytest.importorskip("pexpect", reason="pexpect drives the chat in a pty")
    env = dict(os.environ, CERA_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("CERA_PLUGINS", None)
    child = pexpect.spawn(
        sys.executable, ["-m", "cera_cli.main", "chat", "-m", str(smollm2_path), "--temp", "0", "-n", "-1",
                         "--ignore-eos"],
        env=env, encoding="utf-8", timeout=120, dimensions=(40, 200),
    )  # fmt: skip
    try:
        child.expect("Ctrl-C stops a reply")
        child.expect("> ")
        child.sendline("Write a long story about a dragon.")
        child.expect(r"\r\n")  # the line echoed
        child.expect(r"\w+ \w+ \w+")  # the reply is being written
        child.sendintr()
        child.expect(r"\[stopped\]")
        child.expect(r"\[(\d+) new prompt tokens \(0 reused\), (\d+) generated")
        assert int(child.match.group(2)) < 1000  # stopped long before the context filled
        child.expect("> ")
        child.send("\x1b[A")  # up arrow: readline's history gives the last line back
        child.expect("Write a long story about a dragon.")
        child.send("\x15")  # Ctrl-U clears the recalled line
        child.sendeof()  # Ctrl-D at an empty prompt quits
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0, child.before
    history = (tmp_path / "cache" / "chat_history").read_text()
    # GNU readline writes lines as typed; libedit escapes spaces (\040)
    assert "Write a long story about a dragon." in history.replace("\\040", " ")


def test_ctrl_c_at_the_prompt_quits(smollm2_path, tmp_path):
    pexpect = pytest.importorskip("pexpect", reason="pexpect drives the chat in a pty")
    env = dict(os.environ, CERA_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("CERA_PLUGINS", None)
    # started with SIGINT ignored, as a child of a process that ignores it (a test worker
    # after some libraries ran): Python keeps an inherited SIG_IGN, so chat must restore Ctrl-C
    child = pexpect.spawn(sys.executable, ["-m", "cera_cli.main", "chat", "-m", str(smollm2_path)], env=env,
                          encoding="utf-8", timeout=120,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # fmt: skip
    try:
        child.expect("> ")
        child.sendintr()
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0


def test_save_and_load_count_every_message_of_the_file(smollm2_path, tmp_path):
    """A file of two exchanges holds four messages: /save and /load say so."""
    saved = tmp_path / "two.cera"
    r = chat(smollm2_path, "--temp", "0", "-n", "8", stdin=f"Hello.\nHow are you?\n/save {saved}\n/load {saved}\n")
    assert r.returncode == 0, r.stderr
    assert f"saved the conversation (4 messages, 2 exchanges) to {saved}" in r.stderr
    assert re.search(rf"loaded {re.escape(str(saved))}: 4 messages, 2 exchanges, \d+ tokens evaluated", r.stderr)


def test_a_reply_that_fills_the_context_names_the_exchanges_dropped_next(smollm2_path):
    """No limit on the reply: it runs into the full context; the next message drops the
    oldest exchange and the line names it."""
    r = chat(smollm2_path, "--temp", "0", "-n", "-1", "--ignore-eos", "-c", "128",
             stdin="Tell me about cats.\nAnd dogs?\n")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "the reply was cut: the context (128 tokens) is full" in r.stderr
    assert "dropped the 1 oldest exchange ('Tell me about cats.') to make room (1 so far)" in r.stderr, r.stderr
    assert r.stderr.count("generated at") == 2
