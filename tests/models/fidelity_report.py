"""Print cera's agreement with llama.cpp for every reference file (fidelity.py's measure).

    python tests/models/fidelity_report.py [NAME ...]

Per model: teacher-forced top-1 agreement split by llama.cpp's margin, the largest
logit difference over llama.cpp's top-10, and for free-running greedy decoding how
many of the generated tokens equal llama.cpp's (all cases, and the common prefix).
"""

from __future__ import annotations

import sys
import time

import numpy as np
from fidelity import free_running_greedy, load_reference, model_source, reference_names, summarize, teacher_forced

import cera


def report(name: str) -> dict:
    record = load_reference(name)
    t0 = time.time()
    with cera.load(model_source(record), device="cpu", quiet=True) as loaded:
        forced = [teacher_forced(loaded, c, record["settings"]["n_ctx"]) for c in record["cases"]]
        out = summarize(forced)
        same, total, prefix, confident_ok = 0, 0, [], 0
        for case, result in zip(record["cases"], forced, strict=True):
            ref = case["generated_tokens"]
            ours = free_running_greedy(loaded, case, record["settings"]["n_ctx"])
            n = min(len(ref), len(ours))
            same += sum(a == b for a, b in zip(ours[:n], ref[:n], strict=True))
            total += len(ref)
            k = next((i for i in range(n) if ours[i] != ref[i]), n)
            prefix.append(k)
            confident_ok += not result.mismatches_before_first_low_margin()
    out["greedy_tokens_equal"] = f"{same}/{total}"
    out["greedy_common_prefix_mean"] = round(float(np.mean(prefix)), 1)
    out["cases_equal_up_to_first_low_margin"] = f"{confident_ok}/{len(forced)}"
    out["seconds"] = round(time.time() - t0, 1)
    return out


def main(argv: list[str]) -> int:
    names = argv or reference_names()
    for name in names:
        print(name, report(name), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
