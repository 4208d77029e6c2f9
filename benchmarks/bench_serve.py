"""`cera serve` against llama-cpp-python's server under concurrent clients.

    python benchmarks/bench_serve.py [--model BUNDLE_OR_PATH ...] [--clients 1,4,16] \
        [--threads 2] [--max-tokens 64] [--requests 2] [--json OUT]

For each model, each server in turn is started as its own process on the same GGUF file
with the same thread count and context per sequence (cera: ``cera serve -t T -c C
--parallel MAX_CLIENTS``; llama-cpp-python: ``python -m llama_cpp.server --n_threads T
--n_threads_batch T --n_ctx C --interrupt_requests False --flash_attn True``: without the
first a new request would cut the running stream short; flash attention is how llama.cpp
computes what cera computes, and how the token references are made). Requests turn off
llama-cpp-python's default repeat penalty (1.1), as cera's server has none by default.
After one untimed request, for each client count N, N threads each send ``--requests``
streaming ``/v1/completions`` requests one after the other (greedy, ``max_tokens``; the
same prompts for both servers, a different one per request, no two sharing more than their
first few tokens, so no prompt cache helps either).

Printed per model, server and N: aggregate output tokens per second (all tokens received,
over the wall time from the first request to the last token), time to first token (median
and 90th percentile over the requests, from sending to the first text), and cera's ratio
to llama-cpp-python. Tokens are counted by re-tokenizing each reply with the model's
tokenizer (the same count for the same text, whichever server wrote it). Both servers
decode greedily, so their replies should be the same text; the count of replies that
differ is printed (llama.cpp repacks some K-quant weights and then adds in another order,
so a few may differ on those files).

On a machine whose cores other processes also use, llama.cpp's OpenMP threads spinning at
their barriers collapse its speed (benchmarks/README.md, Caveats): there pass
``--omp-wait-policy passive``, and quote quiet-machine figures with the default.

Needs llama-cpp-python with its server extras (fastapi, sse-starlette, starlette-context,
pydantic-settings: ``pip install --no-deps`` them to keep the installed build) and
cera-serve. Progress goes to stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

try:
    import httpx
except ImportError:  # --help answers without it; a run says what to install
    httpx = None

REPO = Path(__file__).resolve().parent.parent
MODELS = ["smollm2-135m-instruct-q4_1", "qwen2.5-coder-0.5b-instruct-q4_k_m"]

SUBJECTS = [
    "a lighthouse keeper",
    "the history of tea",
    "volcanoes",
    "a robot learning to paint",
    "bread baking",
    "the Roman roads",
    "honeybees",
    "a night train across Europe",
    "chess openings",
    "the deep ocean",
    "a village festival",
    "solar panels",
    "migrating birds",
    "an old clockmaker",
    "glaciers",
    "street markets",
    "paper making",
    "a mountain rescue",
    "coral reefs",
    "the first bicycles",
    "desert cities",
    "a lost letter",
    "jazz in the 1920s",
    "wind turbines",
    "a quiet library",
    "river deltas",
    "the printing press",
    "owls",
    "a ship in a storm",
    "rice terraces",
    "comets",
    "a winter garden",
    "silk roads",
    "lighthouses of Norway",
]
OPENERS = ["Write", "Tell", "Compose", "Give", "Describe", "Explain", "Narrate", "Draft"]


def prompts(n: int) -> list[str]:
    """``n`` distinct prompts sharing at most their first word or two (a prompt cache keeps 64 tokens and more)."""
    out = []
    for i in range(n):
        subject = SUBJECTS[i % len(SUBJECTS)]
        out.append(f"{OPENERS[i % len(OPENERS)]} {i + 1} paragraphs about {subject}, in plain prose.\n\n")
    return out


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, name: str, argv: list[str], port: int, log: Path, env: dict):
        self.name, self.argv, self.port, self.log, self.env = name, argv, port, log, env
        self.proc: subprocess.Popen | None = None

    def __enter__(self):
        self.logf = open(self.log, "w")  # noqa: SIM115 - closed in __exit__
        self.proc = subprocess.Popen(self.argv, stdout=self.logf, stderr=subprocess.STDOUT, cwd=REPO, env=self.env)
        deadline = time.time() + 600
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see {self.log}")
            try:
                r = httpx.get(f"{self.url}/models", timeout=2)
                if r.status_code == 200:
                    # cera answers /v1/models while loading; /health says when it is ready
                    h = httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2)
                    if h.status_code in (200, 404):
                        return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} did not start in 600 s; see {self.log}")

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.logf.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def stream_one(url: str, prompt: str, max_tokens: int) -> tuple[str, float, float]:
    """One streaming completion: (text, seconds to the first text, seconds in all)."""
    # llama-cpp-python's server applies a repeat penalty of 1.1 unless told otherwise: off, as cera's
    body = {
        "model": "m",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "repeat_penalty": 1.0,
    }
    t0 = time.perf_counter()
    first = None
    parts = []
    with httpx.stream("POST", f"{url}/completions", json=body, timeout=1800) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {r.status_code}: {r.read()[:300]!r}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if "error" in data:
                raise RuntimeError(f"{url}: {data['error']}")
            for ch in data.get("choices", []):
                text = ch.get("text") or ""
                if text:
                    if first is None:
                        first = time.perf_counter() - t0
                    parts.append(text)
    return "".join(parts), first if first is not None else float("nan"), time.perf_counter() - t0


def run_clients(url: str, n_clients: int, per_client: int, max_tokens: int, texts: list[str]) -> dict:
    results: dict[int, tuple] = {}
    errors: list = []

    def client(c: int):
        try:
            for r in range(per_client):
                i = c * per_client + r
                results[i] = stream_one(url, texts[i], max_tokens)
        except Exception as e:  # noqa: BLE001 - reported after the round
            errors.append(e)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(n_clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return {"wall": wall, "replies": [results[i] for i in sorted(results)]}


def model_path(name: str) -> str:
    if Path(name).exists():
        return str(Path(name).resolve())
    from cera.sources import bundles

    return str(bundles.fetch_file(name, quiet=False))


def commit() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True).stdout  # fmt: skip
        return rev.strip() + (" (working tree has uncommitted changes)" if dirty.strip() else "")
    except OSError:
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", nargs="*", default=MODELS, help="bundle names or GGUF paths")
    ap.add_argument("--clients", default="1,4,16", help="comma-separated concurrent client counts")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=512, help="context per sequence, both servers")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--requests", type=int, default=2, help="requests per client, one after the other")
    ap.add_argument("--servers", default="cera,llama", help="which servers: cera, llama or both")
    ap.add_argument("--json", type=Path, default=None, help="write every reply's timings here")
    ap.add_argument("--omp-wait-policy", choices=["default", "passive", "active"], default="default",
                    help="OMP_WAIT_POLICY for both servers (llama.cpp's OpenMP threads; cera has none): "
                         "passive on a busy machine, see benchmarks/README.md")  # fmt: skip
    args = ap.parse_args()
    if httpx is None:
        sys.exit("bench_serve.py needs httpx: pip install httpx")
    clients = [int(c) for c in args.clients.split(",")]
    servers = args.servers.split(",")
    cera_bin = shutil.which("cera", path=str(Path(sys.executable).parent)) or shutil.which("cera")
    if "cera" in servers and cera_bin is None:
        sys.exit("bench_serve: the cera command is not installed (pip install -e ./cera-cli ./cera-serve)")
    if "llama" in servers:
        try:
            import llama_cpp.server.app  # noqa: F401
        except ImportError as e:
            sys.exit(f"bench_serve: llama-cpp-python's server cannot be imported ({e}); install its extras with "
                     "pip install --no-deps fastapi sse-starlette 'starlette-context<0.4' pydantic-settings")  # fmt: skip
    import llama_cpp

    from cera import load

    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    env.pop("OMP_WAIT_POLICY", None)
    if args.omp_wait_policy != "default":
        env["OMP_WAIT_POLICY"] = args.omp_wait_policy.upper()
    logdir = Path(os.environ.get("TMPDIR", "/tmp")) / "bench_serve"
    logdir.mkdir(parents=True, exist_ok=True)
    texts = prompts(max(clients) * args.requests)
    report = {"commit": commit(), "threads": args.threads, "ctx": args.ctx, "max_tokens": args.max_tokens,
              "requests_per_client": args.requests, "llama_cpp_python": llama_cpp.__version__,
              "omp_wait_policy": args.omp_wait_policy,
              "load_average_start": os.getloadavg(), "models": {}}  # fmt: skip
    print(f"bench_serve: commit {report['commit']}, {args.threads} threads, load average {os.getloadavg()}",
          file=sys.stderr)  # fmt: skip
    for name in args.model:
        path = model_path(name)
        tok = load(path, device="cpu", threads=1, quiet=True)
        rows = report["models"][name] = {}
        for server in servers:
            port = free_port()
            if server == "cera":
                argv = [cera_bin, "serve", "-m", path, "--port", str(port), "-t", str(args.threads), "-c",
                        str(args.ctx), "--parallel", str(max(clients)), "--max-queue", "1024"]  # fmt: skip
            else:
                argv = [sys.executable, "-m", "llama_cpp.server", "--model", path, "--port", str(port), "--n_threads",
                        str(args.threads), "--n_threads_batch", str(args.threads), "--n_ctx", str(args.ctx),
                        "--interrupt_requests", "False", "--flash_attn", "True", "--verbose", "False"]  # fmt: skip
            log = logdir / f"{server}-{Path(path).stem}.log"
            print(f"  {name}: starting {server} ({log})", file=sys.stderr)
            with Server(server, argv, port, log, env) as srv:
                stream_one(srv.url, "Warm up: say hello.\n\n", 8)
                for n in clients:
                    r = run_clients(srv.url, n, args.requests, args.max_tokens, texts)
                    counts = [len(tok.tokenize(text, add_special=False)) for text, _, _ in r["replies"]]
                    ttft = [f for _, f, _ in r["replies"]]
                    rows.setdefault(n, {})[server] = {
                        "tokens": sum(counts), "wall": r["wall"], "tok_s": sum(counts) / r["wall"],
                        "ttft_median": statistics.median(ttft), "ttft_p90": _pct(ttft, 0.9),
                        "texts": [text for text, _, _ in r["replies"]],
                    }  # fmt: skip
                    row = rows[n][server]
                    print(f"    {server:5s} {n:3d} clients: {row['tok_s']:7.1f} tok/s, TTFT median "
                          f"{row['ttft_median'] * 1000:7.0f} ms, p90 {row['ttft_p90'] * 1000:7.0f} ms "
                          f"({row['tokens']} tokens in {row['wall']:.1f} s)", file=sys.stderr)  # fmt: skip
        tok.close()
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))
    report["load_average_end"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    print(f"commit {report['commit']}; {args.threads} threads; context {args.ctx} per sequence; {args.max_tokens} "
          f"tokens per reply, greedy; {args.requests} requests per client; llama-cpp-python {llama_cpp.__version__}; "
          f"OMP_WAIT_POLICY {args.omp_wait_policy}; "
          f"load average {report['load_average_start'][0]:.2f} at start, {report['load_average_end'][0]:.2f} at end")  # fmt: skip
    print()
    print("| model | clients | cera tok/s | llama-cpp-python tok/s | cera/llama | cera TTFT median (p90) ms "
          "| llama TTFT median (p90) ms | replies differing |")  # fmt: skip
    print("|:--|--:|--:|--:|--:|--:|--:|--:|")
    for name, rows in report["models"].items():
        for n, row in rows.items():
            c, ll = row.get("cera"), row.get("llama")
            ratio = f"{c['tok_s'] / ll['tok_s']:.2f}" if c and ll else "-"
            differ = (
                f"{sum(a != b for a, b in zip(c['texts'], ll['texts'], strict=True))}/{len(c['texts'])}"
                if c and ll
                else "-"
            )

            def cell(x, key):
                return f"{x[key]:.1f}" if x else "-"

            def lat(x):
                return f"{x['ttft_median'] * 1000:.0f} ({x['ttft_p90'] * 1000:.0f})" if x else "-"

            print(
                f"| {name} | {n} | {cell(c, 'tok_s')} | {cell(ll, 'tok_s')} | {ratio} | {lat(c)} | {lat(ll)} | {differ} |"
            )


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


if __name__ == "__main__":
    main()
