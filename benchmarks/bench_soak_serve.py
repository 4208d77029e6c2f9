"""A soak of `cera serve`: many streaming clients that disconnect and send bad requests,
for minutes, while the server's memory is sampled and its greedy outputs are checked.

    python benchmarks/bench_soak_serve.py [--model BUNDLE_OR_PATH] [--clients 64] \
        [--seconds 600] [--max-requests 200000] [--threads 2] [--parallel 4] [--every 10]

The server runs as its own process on loopback (``cera serve --host 127.0.0.1``). First
the reference: each of a few prompts completed greedily (``temperature`` 0) once, alone.
Then ``--clients`` threads send requests until ``--seconds`` have passed or
``--max-requests`` have been sent, each choosing in turn (from a seeded random sequence):
a streaming greedy completion of a reference prompt read to the end (its text compared
with the reference), a streaming request abandoned after a few chunks (the connection
closed mid-stream), a bad request (not JSON, nested past the limit, fields of the wrong
type: a 4xx is expected), or a plain non-streaming completion. Every ``--every`` seconds
the server's resident memory (VmRSS, from /proc) is printed; at the end the reference
prompts are completed once more alone, and the summary gives the counts per kind and
status, the replies that differed from the reference, and memory at the start, the end
and its peak. The exit status is 1 when a greedy reply differed, a 5xx came back, or the
server died.

Loopback only, bounded in count and time; a benchmark to run by hand (not in the tests).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections import Counter

PROMPTS = [
    "The capital of France is",
    "Write a list of three fruits:",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colours are",
]
BAD = [
    b"{not json",
    b'{"prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    json.dumps({"prompt": "Hi", "max_tokens": "many"}).encode(),
    json.dumps({"prompt": "Hi", "stream": True, "stream_options": "yes"}).encode(),
    json.dumps({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}).encode(),
    json.dumps({"prompt": "Hi", "temperature": -3}).encode(),
    json.dumps({"prompt": [10**12]}).encode(),
    b"[]",
]
MAX_TOKENS = 16


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Client:
    def __init__(self, port: int, timeout: float = 300):
        self.port, self.timeout = port, timeout

    def _conn(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)

    def post(self, body: bytes) -> tuple[int, bytes]:
        c = self._conn()
        try:
            c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def stream(self, prompt: str, abandon_after: int | None = None) -> tuple[int, str | None]:
        """A streaming greedy completion: (status, its text), or (status, None) when abandoned."""
        body = json.dumps({"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True}).encode()
        c = self._conn()
        try:
            c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                r.read()
                return r.status, None
            text, chunks = [], 0
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    break
                chunks += 1
                text.append(json.loads(line[6:])["choices"][0].get("text") or "")
                if abandon_after is not None and chunks >= abandon_after:
                    c.sock.shutdown(socket.SHUT_RDWR)  # the client goes away mid-stream
                    return r.status, None
            return r.status, "".join(text)
        finally:
            c.close()

    def complete(self, prompt: str) -> str:
        body = json.dumps({"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}).encode()
        status, data = self.post(body)
        if status != 200:
            raise RuntimeError(f"the reference request answered {status}: {data[:300]!r}")
        return json.loads(data)["choices"][0]["text"]


def start_server(args) -> tuple[subprocess.Popen, int]:
    port = free_port()
    argv = [sys.executable, "-m", "cera_cli.main", "serve", "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
            "-t", str(args.threads), "-P", str(args.parallel), "-c", str(args.ctx)]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "CERA_PLUGINS"}
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"cera serve exited ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            r = c.getresponse()
            ok = r.status == 200 and json.loads(r.read()).get("status") == "ready"
            c.close()
            if ok:
                return proc, port
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("cera serve did not become ready within 300 s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="GGUF file or bundle (default: smollm2-135m-instruct-q4_1)")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--seconds", type=float, default=600.0, help="how long the soak runs (default 10 minutes)")
    p.add_argument("--max-requests", type=int, default=200_000, help="at most this many requests in all")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--ctx", type=int, default=512, help="context per sequence")
    p.add_argument("--every", type=float, default=10.0, help="seconds between memory samples")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.model is None:
        from cera.sources import bundles

        args.model = str(bundles.fetch_file("smollm2-135m-instruct-q4_1", quiet=True))

    proc, port = start_server(args)
    client = Client(port)
    failures: list[str] = []
    try:
        reference = {pr: client.complete(pr) for pr in PROMPTS}
        rss0 = rss_mb(proc.pid)
        print(f"server pid {proc.pid}, port {port}; reference done; RSS {rss0:.0f} MiB", flush=True)
        counts: Counter[tuple[str, int]] = Counter()
        mismatches: list[tuple[str, str, str]] = []
        lock = threading.Lock()
        sent = [0]
        deadline = time.monotonic() + args.seconds
        stop = threading.Event()

        def worker(i: int) -> None:
            rng = random.Random(args.seed * 1000 + i)
            c = Client(port)
            while not stop.is_set() and time.monotonic() < deadline:
                with lock:
                    if sent[0] >= args.max_requests:
                        return
                    sent[0] += 1
                kind = rng.choices(["stream", "abandon", "bad", "plain"], weights=[4, 3, 2, 1])[0]
                prompt = rng.choice(PROMPTS)
                try:
                    if kind == "stream":
                        status, text = c.stream(prompt)
                        if status == 200 and text != reference[prompt]:
                            with lock:
                                mismatches.append((prompt, reference[prompt], text))
                    elif kind == "abandon":
                        status, _ = c.stream(prompt, abandon_after=rng.randint(1, 4))
                    elif kind == "bad":
                        status, _ = c.post(rng.choice(BAD))
                    else:
                        status, _ = c.post(json.dumps({"prompt": prompt, "max_tokens": 4}).encode())
                except (OSError, http.client.HTTPException) as e:
                    kind, status = f"{kind}-{type(e).__name__}", 0
                with lock:
                    counts[(kind, status)] += 1

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(args.clients)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        samples = [rss0]
        next_sample = t0 + args.every
        while any(t.is_alive() for t in threads):
            time.sleep(0.2)
            if proc.poll() is not None:
                failures.append(f"the server exited ({proc.returncode}) during the soak")
                stop.set()
                break
            if time.monotonic() < next_sample:
                continue
            next_sample += args.every
            samples.append(rss_mb(proc.pid))
            with lock:
                n = sum(counts.values())
            print(f"{time.monotonic() - t0:7.1f} s  {n:7d} requests  RSS {samples[-1]:7.1f} MiB", flush=True)
            if time.monotonic() > deadline + 120:  # clients stuck past the end: say so, do not wait forever
                failures.append("clients were still running two minutes after the end")
                stop.set()
                break
        for t in threads:
            t.join(timeout=30)
        if proc.poll() is None:
            samples.append(rss_mb(proc.pid))
            after = {pr: client.complete(pr) for pr in PROMPTS}
            changed = [pr for pr in PROMPTS if after[pr] != reference[pr]]
            if changed:
                failures.append(f"greedy replies changed after the soak for {changed}")
        print("\nrequests by kind and status:")
        for (kind, status), n in sorted(counts.items()):
            print(f"  {kind:24s} {status:4d}  {n}")
        server_errors = sum(n for (_, status), n in counts.items() if status >= 500)
        if server_errors:
            failures.append(f"{server_errors} answers were 5xx")
        if mismatches:
            failures.append(f"{len(mismatches)} streamed greedy replies differed from the reference, e.g. {mismatches[0]}")
        print(f"RSS: start {samples[0]:.1f} MiB, end {samples[-1]:.1f} MiB, peak {max(samples):.1f} MiB "
              f"({len(samples)} samples)")  # fmt: skip
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    for f in failures:
        print(f"FAILED: {f}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
