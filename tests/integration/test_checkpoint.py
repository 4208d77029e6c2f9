"""Checkpoint files (cera.formats.checkpoint): saved atomically, checked on load, and continuing
from one gives exactly the tokens of an uninterrupted run."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cera
from cera.formats.checkpoint import CheckpointError


@pytest.fixture(scope="module")
def loaded(smollm2_path):
    m = cera.load(str(smollm2_path), device="cpu", threads=2, quiet=True)
    yield m
    m.close()


def test_continuing_from_a_checkpoint_gives_the_uninterrupted_tokens(loaded, tmp_path):
    s = loaded.new_session(n_ctx=256)
    s.append_text("Write a haiku about the sea.")
    first = s.generate(max_tokens=12, temperature=0, ignore_eos=True)
    s.save(tmp_path / "a.ckpt")
    rest = s.generate(max_tokens=20, temperature=0, ignore_eos=True).tokens
    t = loaded.new_session(n_ctx=256)
    t.load(tmp_path / "a.ckpt")
    assert t.tokens == s.tokens[: len(t.tokens)] and t.n_tokens > 0
    assert t.generate(max_tokens=20, temperature=0, ignore_eos=True).tokens == rest
    assert first.n_generated == 12


def test_a_crash_during_a_second_save_leaves_the_first_intact(loaded, smollm2_path, tmp_path):
    target = tmp_path / "c.ckpt"
    s = loaded.new_session(n_ctx=256)
    s.append_text("Once upon a time")
    s.generate(max_tokens=6, temperature=0, ignore_eos=True)
    s.save(target)
    want = s.generate(max_tokens=10, temperature=0, ignore_eos=True).tokens
    size = target.stat().st_size
    for crash_at in (0, 7, 30, size // 3, size - 40, size - 1):
        # another process continues the session and dies while saving over the checkpoint
        code = textwrap.dedent(f"""
            import cera
            from cera.formats import checkpoint
            m = cera.load({str(smollm2_path)!r}, device="cpu", threads=1, quiet=True)
            s = m.new_session(n_ctx=256)
            s.load({str(target)!r})
            s.generate(max_tokens=3, temperature=0, ignore_eos=True)
            checkpoint.save(s, {str(target)!r}, _crash_at={crash_at})
        """)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 137, proc.stderr
        t = loaded.new_session(n_ctx=256)
        t.load(target)  # the first checkpoint, whole
        assert t.generate(max_tokens=10, temperature=0, ignore_eos=True).tokens == want


def test_damaged_foreign_and_mismatched_checkpoints_are_refused_cleanly(loaded, tmp_path, gemma3_path):
    s = loaded.new_session(n_ctx=128)
    s.append_text("Hello")
    s.evaluate()
    path = tmp_path / "x.ckpt"
    s.save(path)
    data = bytearray(path.read_bytes())
    # damaged: one flipped byte in the payload
    bad = tmp_path / "bad.ckpt"
    data2 = bytearray(data)
    data2[len(data2) // 2] ^= 0xFF
    bad.write_bytes(bytes(data2))
    fresh = loaded.new_session(n_ctx=128)
    with pytest.raises(CheckpointError, match="damaged"):
        fresh.load(bad)
    assert fresh.tokens == [] and fresh.pending == []  # nothing half-restored
    # truncated
    (tmp_path / "short.ckpt").write_bytes(bytes(data[:100]))
    with pytest.raises(CheckpointError):
        fresh.load(tmp_path / "short.ckpt")
    # not a checkpoint
    (tmp_path / "junk.ckpt").write_bytes(b"hello world" * 10)
    with pytest.raises(CheckpointError, match="not a cera checkpoint"):
        fresh.load(tmp_path / "junk.ckpt")
    # a newer format
    newer = bytearray(data)
    newer[8:12] = (99).to_bytes(4, "little")
    import hashlib

    newer[-32:] = hashlib.sha256(bytes(newer[:-32])).digest()
    (tmp_path / "new.ckpt").write_bytes(bytes(newer))
    with pytest.raises(CheckpointError, match="format 99"):
        fresh.load(tmp_path / "new.ckpt")
    # another precision
    with pytest.raises(CheckpointError, match="f16 KV cache"):
        loaded.new_session(n_ctx=128, kv_type="f32").load(path)
    # another model
    with cera.load(str(gemma3_path), device="cpu", threads=2, quiet=True) as other:
        with pytest.raises(CheckpointError, match="another model"):
            other.new_session(n_ctx=128).load(path)


def test_a_chat_checkpoint_keeps_the_messages(loaded, tmp_path):
    from cera.chat.session import Chat

    chat = loaded.chat(system="Be brief.")
    chat.send("Name a colour.", max_tokens=8, temperature=0)
    chat.save(tmp_path / "chat.ckpt")
    again = Chat.load(loaded.new_session(), tmp_path / "chat.ckpt")
    assert again.messages == chat.messages
    a = chat.send("Another.", max_tokens=8, temperature=0)
    b = again.send("Another.", max_tokens=8, temperature=0)
    assert a.tokens == b.tokens and again.last_reused == chat.last_reused
    with pytest.raises(CheckpointError, match="not a chat"):
        s = loaded.new_session()
        s.append_text("x")
        s.evaluate()
        s.save(tmp_path / "plain.ckpt")
        Chat.load(loaded.new_session(), tmp_path / "plain.ckpt")
    assert np is not None
