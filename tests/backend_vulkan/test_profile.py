"""`cera bench --profile` on the Vulkan backend: the per-kernel table of one decoded token
(timestamp queries after every dispatch), on the real SmolLM2 file.

The table's rows and counts are worked out from the architecture (30 layers; hidden 576,
feed-forward 1536, 9 heads of 64 with 3 KV heads: q and o 576 -> 576, k and v 576 ->
192; the output is the tied Q8_0 embedding, 49,152 rows) and from the kernels a software
adapter gets (the row kernel "subgroup": Q, K, V as three dispatches; gate and up as one
with their swiglu; the rotations and cache stores inside the attention's dispatch). Each
product's label names its type and shape (depth x features), so the profile tells the
down products from the others of their type.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from .conftest import needs_vulkan

WANT_ON_SOFTWARE = {
    "matvec+swiglu Q4_1 576x1536": 30,
    "matvec Q4_1 576x576": 60,  # q and o
    "matvec Q4_1 576x192": 60,  # k and v
    "matvec Q4_1 1536x576": 30,  # down
    "matvec Q8_0 576x49152": 1,  # the output
    "rope+kv_store+attention": 30,  # a decode step's attention rotates q and k itself
    "argmax (chunks)": 1,
    "argmax (combine)": 1,
    "embedding Q8_0": 1,
}


@needs_vulkan
def test_profile_of_a_decoded_token(vulkan, smollm2_path):
    if not vulkan.ctx.software:
        pytest.skip("the expected table is a software adapter's kernels (GPUs fuse Q/K/V and plan the unit kernel)")
    p = subprocess.run(
        [sys.executable, "-m", "cera_cli.main", "bench", "-m", str(smollm2_path), "--device", "vulkan",
         "-p", "0", "-n", "1", "-r", "1", "--profile"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    text = p.stdout
    head = re.search(r"kernels of one decoded token \((\d+) dispatches", text)
    assert head, text
    rows = {}
    for m in re.finditer(r"^  (.+?)\s+(\d+) x\s+([0-9.]+) us\s+([0-9.]+) %$", text, re.M):
        rows[m[1]] = (int(m[2]), float(m[3]))
    assert {k: n for k, (n, _) in rows.items()} == WANT_ON_SOFTWARE
    assert int(head[1]) == sum(WANT_ON_SOFTWARE.values())
    assert all(us > 0 for _, us in rows.values()), rows
