"""The fuzz harness's driver: a pool of workers (`worker.py`), each case in a forked child
with a time and memory limit, and a tally that fails on any outcome other than a clean
run or a `CeraError`.

``Pool(n)`` starts n workers; ``pool.run(cases)`` spreads the cases over them and returns
the outcomes in order. `Tally` counts outcomes and keeps the bad ones, each with what it
takes to reproduce it (the case, and for GGUF cases the file, kept under ``FINDINGS``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# Where bad cases' files are kept for a human to look at (not in the repository).
FINDINGS = Path(os.environ.get("CERA_FUZZ_FINDINGS", "/tmp/cera-fuzz-findings"))
GOOD = ("ok", "cera")
MEMORY_HEADROOM = 1536 * 2**20  # address space a case may add to what the worker holds
# CERA_FUZZ_PROGRESS=N prints the tally every N cases (to standard error) during long runs.
PROGRESS_EVERY = int(os.environ.get("CERA_FUZZ_PROGRESS", "0") or 0)


class Worker:
    def __init__(self):
        env = dict(os.environ)
        env.pop("CERA_PLUGINS", None)
        env.pop("CERA_PLUGIN_OVERRIDES", None)
        env.setdefault("CERA_THREADS", "1")
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "worker.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=str(REPO),
        )
        hello = json.loads(self.proc.stdout.readline())
        assert hello.get("ready"), hello
        self.memory = hello["vm_size"] + MEMORY_HEADROOM

    def run(self, case: dict) -> dict:
        case = {"memory": self.memory, **case}
        self.proc.stdin.write(json.dumps(case) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the fuzz worker died (the harness itself broke, not a case)")
        return json.loads(line)

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except Exception:  # noqa: BLE001
            self.proc.kill()


class Pool:
    def __init__(self, n: int = 1):
        self.workers = [Worker() for _ in range(max(1, n))]

    def run(self, cases: list[dict]) -> list[dict]:
        results: list[dict | None] = [None] * len(cases)
        next_index = iter(range(len(cases)))
        lock = threading.Lock()

        def serve(worker: Worker):
            while True:
                with lock:
                    i = next(next_index, None)
                if i is None:
                    return
                results[i] = worker.run(cases[i])

        threads = [threading.Thread(target=serve, args=(w,)) for w in self.workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results  # type: ignore[return-value]

    def close(self):
        for w in self.workers:
            w.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def pool_size() -> int:
    return max(1, min(int(os.environ.get("CERA_FUZZ_WORKERS", "1")), os.cpu_count() or 1))


class Tally:
    """Outcomes counted; the bad ones kept with how to reproduce them."""

    def __init__(self, label: str):
        self.label = label
        self.counts: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()  # CeraError classes
        self.bad: list[tuple[dict, dict]] = []
        self.peak_mb = 0.0
        self.seconds = 0.0

    def add(self, case: dict, result: dict, keep: bytes | None = None) -> None:
        outcome = result["outcome"]
        self.counts[outcome] += 1
        self.peak_mb = max(self.peak_mb, result.get("peak_mb", 0.0))
        self.seconds += result.get("s", 0.0)
        if outcome == "cera":
            self.errors[result["detail"].split(":", 1)[0]] += 1
        if PROGRESS_EVERY and sum(self.counts.values()) % PROGRESS_EVERY == 0:
            # long runs say how far they got, so a run cut short still has its counts
            print(f"[progress] {self.summary()}", file=sys.stderr, flush=True)
        if outcome not in GOOD:
            if keep is not None:
                FINDINGS.mkdir(parents=True, exist_ok=True)
                target = FINDINGS / f"{self.label}-{len(self.bad)}.gguf"
                if isinstance(keep, (bytes, bytearray)):
                    target.write_bytes(keep)
                else:
                    shutil.copyfile(keep, target)
                case = {**case, "kept_as": str(target)}
            self.bad.append((case, result))
            if PROGRESS_EVERY:
                print(f"[finding] {result['outcome']}: case {case.get('case')} {str(result.get('detail'))[-500:]}",
                      file=sys.stderr, flush=True)  # fmt: skip

    def summary(self) -> str:
        total = sum(self.counts.values())
        parts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        errs = ", ".join(f"{k} {v}" for k, v in self.errors.most_common(8))
        return (
            f"{self.label}: {total} cases ({parts}); CeraErrors: {errs or 'none'}; "
            f"largest child peak RSS {self.peak_mb:.0f} MiB; {self.seconds:.0f} s of case time"
        )

    def failure_report(self, limit: int = 5) -> str:
        lines = [self.summary()]
        for case, result in self.bad[:limit]:
            shown = {k: (v if not isinstance(v, str) or len(v) < 300 else v[:300] + "...") for k, v in case.items()}
            lines.append(f"--- {result['outcome']}: {json.dumps(shown)}\n{result.get('detail', '')}")
        return "\n".join(lines)

    def check(self) -> None:
        print(self.summary())
        assert not self.bad, self.failure_report()


def case_numbers(ci: int, slow: int, run_slow: bool, offset: int = 0) -> range:
    """The case numbers a fuzz test runs: ``ci`` of them, ``slow`` with --run-slow, from
    CERA_FUZZ_START (+ ``offset``)."""
    start = int(os.environ.get("CERA_FUZZ_START", "0")) + offset
    return range(start, start + (slow if run_slow else ci))
