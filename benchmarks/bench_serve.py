"""`cera serve` against llama.cpp's servers under concurrent streaming clients, and the
stall a long prompt puts on a running stream.

    python benchmarks/bench_serve.py [--model BUNDLE_OR_PATH ...] [--clients 1,4,16] \
        [--threads 2] [--max-tokens 64] [--requests 2] [--servers cera,llama] \
        [--llama-server PATH] [--llama-server-parallel 4] [--stall-tokens 1500] [--json OUT]

For each model, each server in turn is started as its own process on the same GGUF file
with the same thread count and context per sequence:

- cera: ``cera serve -t T -c C --parallel MAX_CLIENTS`` (one scheduler: the running
  sequences decode in one forward pass, prompts go in chunks between those passes);
- llama (llama-cpp-python's server): ``python -m llama_cpp.server --n_threads T
  --n_threads_batch T --n_ctx C --interrupt_requests False --flash_attn True`` (without
  the first a new request would cut the running stream short; flash attention is how
  llama.cpp computes what cera computes); it decodes one request at a time;
- llama-server (with ``--llama-server PATH``, a llama-server binary built from llama.cpp,
  e.g. the llama-cpp-python 0.3.36 source's vendor/llama.cpp): ``PATH -m FILE -t T -tb T
  -c C*NP -np NP -fa on --no-webui`` (``--llama-server-parallel NP`` slots of C tokens
  each, continuous batching).

Requests turn off llama-cpp-python's default repeat penalty (1.1), as cera's server has
none by default. After one untimed request, for each client count N, N threads each send
``--requests`` streaming ``/v1/completions`` requests one after the other (greedy,
``max_tokens``; a different prompt per request, no two sharing more than their first few
tokens, so no prompt cache helps); then the same N * requests prompts are sent serially by
one client, and the speedup of the concurrent round over the serial one is printed.

The stall: one stream generates ``--stall-stream-tokens`` tokens; once it has 8, a second
client sends a prompt of about ``--stall-tokens`` tokens (one token asked). The first
stream's gaps between tokens are printed: the median before the long prompt came, and the
longest while it was evaluated (a server that evaluates prompts between decode steps in
chunks keeps that to about one chunk's time; one that evaluates a prompt whole stalls the
stream for all of it).

Printed per model, server and N: aggregate output tokens per second (all tokens received,
over the wall time from the first request to the last token), time to first token (median
and 90th percentile, from sending to the first text), the speedup over serial, and cera's
ratio to each other server. Tokens are counted by re-tokenizing each reply with the
model's tokenizer. All servers decode greedily, so their replies should be the same text;
the count of replies that differ is printed (llama.cpp repacks some K-quant weights and
then adds in another order, so a few may differ on those files).

On a machine whose cores other processes also use, llama.cpp's OpenMP threads spinning at
their barriers collapse its speed (benchmarks/README.md, Caveats): there pass
``--omp-wait-policy passive``, and quote quiet-machine figures with the default.

Needs cera-serve and httpx; ``--servers llama`` needs llama-cpp-python with its server
extras (fastapi, sse-starlette, starlette-context, pydantic-settings: ``pip install
--no-deps`` them to keep the installed build). Progress goes to stderr, the tables to stdout.
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


def server_argv(server: str, path: str, port: int, args, n_parallel: int) -> list[str]:
    if server == "cera":
        return [args.cera_bin, "serve", "-m", path, "--alias", "m", "--port", str(port), "-t", str(args.threads), "-c", str(args.ctx),
                "--parallel", str(n_parallel), "--max-queue", "1024"]  # fmt: skip
    if server == "llama":
        return [sys.executable, "-m", "llama_cpp.server", "--model", path, "--port", str(port), "--n_threads",
                str(args.threads), "--n_threads_batch", str(args.threads), "--n_ctx", str(args.ctx),
                "--interrupt_requests", "False", "--flash_attn", "True", "--verbose", "False"]  # fmt: skip
    np_ = args.llama_server_parallel
    return [args.llama_server, "-m", path, "--port", str(port), "-t", str(args.threads), "-tb", str(args.threads),
            "-c", str(args.ctx * np_), "-np", str(np_), "-fa", "on", "--no-webui"]  # fmt: skip


def stream_times(url: str, prompt: str, max_tokens: int, times: list) -> None:
    """One streaming completion, appending the arrival time of each piece of text to ``times``."""
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "repeat_penalty": 1.0}  # fmt: skip
    with httpx.stream("POST", f"{url}/completions", json=body, timeout=1800) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {r.status_code}: {r.read()[:300]!r}")
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                data = json.loads(line[6:])
                if any(ch.get("text") for ch in data.get("choices", [])):
                    times.append(time.perf_counter())


def long_prompt(tok, n_tokens: int) -> str:
    """About ``n_tokens`` tokens of prose that no other request of the run starts with."""
    words, text = prompts(len(SUBJECTS)), ""
    i = 0
    while len(tok.tokenize(text, add_special=False)) < n_tokens:
        text += words[i % len(words)].strip() + " Then more about it, at length. "
        i += 1
    return "Read this, then say one word.\n\n" + text


def measure_stall(url: str, stream_tokens: int, prompt: str) -> dict:
    times: list[float] = []
    runner = threading.Thread(target=stream_times, args=(url, "Write a long story about a lighthouse.\n\n",
                                                         stream_tokens, times))  # fmt: skip
    runner.start()
    while len(times) < 8 and runner.is_alive():
        time.sleep(0.005)
    sent = time.perf_counter()
    first: list[float] = []
    stream_times(url, prompt, 1, first)
    answered = first[0] if first else time.perf_counter()
    runner.join()
    gaps = [(b - a, b) for a, b in zip(times, times[1:], strict=False)]
    before = [g for g, end in gaps if end < sent]
    during = [g for g, end in gaps if sent <= end <= answered + (max(before) if before else 0)]
    return {"gap_median_before": statistics.median(before) if before else float("nan"),
            "gap_max_during": max(during) if during else float("nan"), "long_prompt_seconds": answered - sent,
            "stream_tokens": len(times), "tokens_during": len(during)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", nargs="*", default=MODELS, help="bundle names or GGUF paths")
    ap.add_argument("--clients", default="1,4,16", help="comma-separated concurrent client counts")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=2048, help="context per sequence, every server")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--requests", type=int, default=2, help="requests per client, one after the other")
    ap.add_argument("--servers", default="cera,llama", help="which servers: cera, llama (llama-cpp-python), "
                    "llama-server (needs --llama-server)")  # fmt: skip
    ap.add_argument("--llama-server", default=None, metavar="PATH", help="a llama-server binary (adds it to --servers)")
    ap.add_argument("--llama-server-parallel", type=int, default=4, metavar="NP", help="llama-server's -np")
    ap.add_argument("--no-serial", action="store_true", help="skip the serial rounds")
    ap.add_argument("--stall-tokens", type=int, default=1500, help="tokens of the long prompt (0: no stall test)")
    ap.add_argument("--stall-stream-tokens", type=int, default=200, help="tokens of the stream it interrupts")
    ap.add_argument("--json", type=Path, default=None, help="write every reply's timings here")
    ap.add_argument("--omp-wait-policy", choices=["default", "passive", "active"], default="default",
                    help="OMP_WAIT_POLICY for every server (llama.cpp's OpenMP threads; cera has none): "
                         "passive on a busy machine, see benchmarks/README.md")  # fmt: skip
    args = ap.parse_args()
    if httpx is None:
        sys.exit("bench_serve.py needs httpx: pip install httpx")
    clients = [int(c) for c in args.clients.split(",")]
    servers = [x for x in args.servers.split(",") if x]
    if args.llama_server and "llama-server" not in servers:
        servers.append("llama-server")
    if "llama-server" in servers and not (args.llama_server and os.access(args.llama_server, os.X_OK)):
        sys.exit("bench_serve: --servers llama-server needs --llama-server PATH, an executable llama-server binary "
                 "(build it from llama.cpp: cmake -B build && cmake --build build --target llama-server)")  # fmt: skip
    args.cera_bin = shutil.which("cera", path=str(Path(sys.executable).parent)) or shutil.which("cera")
    if "cera" in servers and args.cera_bin is None:
        sys.exit("bench_serve: the cera command is not installed (pip install -e ./cera-cli ./cera-serve)")
    llama_version = None
    if "llama" in servers:
        try:
            import llama_cpp
            import llama_cpp.server.app  # noqa: F401
        except ImportError as e:
            sys.exit(f"bench_serve: llama-cpp-python's server cannot be imported ({e}); install its extras with "
                     "pip install --no-deps fastapi sse-starlette 'starlette-context<0.4' pydantic-settings")  # fmt: skip
        llama_version = llama_cpp.__version__

    from cera import load

    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    env.pop("OMP_WAIT_POLICY", None)
    if args.omp_wait_policy != "default":
        env["OMP_WAIT_POLICY"] = args.omp_wait_policy.upper()
    logdir = Path(os.environ.get("TMPDIR", "/tmp")) / "bench_serve"
    logdir.mkdir(parents=True, exist_ok=True)
    texts = prompts(max(clients) * args.requests)
    report = {"commit": commit(), "threads": args.threads, "ctx": args.ctx, "max_tokens": args.max_tokens,
              "requests_per_client": args.requests, "llama_cpp_python": llama_version,
              "llama_server": args.llama_server, "llama_server_parallel": args.llama_server_parallel,
              "omp_wait_policy": args.omp_wait_policy, "load_average_start": os.getloadavg(), "models": {},
              "stall": {}}  # fmt: skip
    print(f"bench_serve: commit {report['commit']}, {args.threads} threads, load average {os.getloadavg()}",
          file=sys.stderr)  # fmt: skip
    for name in args.model:
        path = model_path(name)
        tok = load(path, device="cpu", threads=1, quiet=True)
        rows = report["models"][name] = {}
        stall_text = long_prompt(tok, args.stall_tokens) if args.stall_tokens else None
        for server in servers:
            port = free_port()
            argv = server_argv(server, path, port, args, max(clients))
            log = logdir / f"{server}-{Path(path).stem}.log"
            print(f"  {name}: starting {server} ({log})", file=sys.stderr)
            with Server(server, argv, port, log, env) as srv:
                stream_one(srv.url, "Warm up: say hello.\n\n", 8)
                for n in clients:
                    row = rows.setdefault(n, {})[server] = _round(srv.url, n, args.requests, args.max_tokens, texts, tok)
                    if not args.no_serial and n > 1:
                        serial = _round(srv.url, 1, n * args.requests, args.max_tokens, texts, tok)
                        row["serial_tok_s"] = serial["tok_s"]
                        row["speedup"] = row["tok_s"] / serial["tok_s"]
                        row["serial_differ"] = sum(a != b for a, b in zip(row["texts"], serial["texts"], strict=True))
                    print(f"    {server:12s} {n:3d} clients: {row['tok_s']:7.1f} tok/s"
                          + (f" ({row['speedup']:.2f}x serial)" if "speedup" in row else "")
                          + f", TTFT median {row['ttft_median'] * 1000:7.0f} ms, p90 {row['ttft_p90'] * 1000:7.0f} ms "
                          f"({row['tokens']} tokens in {row['wall']:.1f} s)", file=sys.stderr)  # fmt: skip
                if stall_text is not None:
                    st = report["stall"].setdefault(name, {})[server] = measure_stall(srv.url, args.stall_stream_tokens,
                                                                                      stall_text)  # fmt: skip
                    print(f"    {server:12s} stall: median gap {st['gap_median_before'] * 1000:.0f} ms before, longest "
                          f"{st['gap_max_during'] * 1000:.0f} ms during a {args.stall_tokens}-token prompt "
                          f"({st['long_prompt_seconds']:.2f} s to its first token)", file=sys.stderr)  # fmt: skip
        tok.close()
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))
    report["load_average_end"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    _print_tables(report, servers, args)


def _round(url: str, n: int, per_client: int, max_tokens: int, texts: list[str], tok) -> dict:
    r = run_clients(url, n, per_client, max_tokens, texts)
    counts = [len(tok.tokenize(text, add_special=False)) for text, _, _ in r["replies"]]
    ttft = [f for _, f, _ in r["replies"]]
    return {"tokens": sum(counts), "wall": r["wall"], "tok_s": sum(counts) / r["wall"],
            "ttft_median": statistics.median(ttft), "ttft_p90": _pct(ttft, 0.9),
            "texts": [text for text, _, _ in r["replies"]]}  # fmt: skip


def _print_tables(report: dict, servers: list[str], args) -> None:
    print(f"commit {report['commit']}; {args.threads} threads; context {args.ctx} per sequence; {args.max_tokens} "
          f"tokens per reply, greedy; {args.requests} requests per client; llama-cpp-python "
          f"{report['llama_cpp_python'] or '-'}; llama-server {report['llama_server'] or '-'} "
          f"(-np {args.llama_server_parallel}); OMP_WAIT_POLICY {args.omp_wait_policy}; load average "
          f"{report['load_average_start'][0]:.2f} at start, {report['load_average_end'][0]:.2f} at end")  # fmt: skip
    others = [s for s in servers if s != "cera"]
    print()
    head = ["model", "clients"] + [f"{s} tok/s (x serial)" for s in servers] + [f"cera/{s}" for s in others]
    head += [f"{s} TTFT median (p90) ms" for s in servers] + [f"replies differing cera/{s}" for s in others]
    print("| " + " | ".join(head) + " |")
    print("|:--|" + "--:|" * (len(head) - 1))
    for name, rows in report["models"].items():
        for n, row in rows.items():
            cells = [name, str(n)]
            for s in servers:
                x = row.get(s)
                cells.append(f"{x['tok_s']:.1f}" + (f" ({x['speedup']:.2f}x)" if x and "speedup" in x else "")
                             if x else "-")  # fmt: skip
            c = row.get("cera")
            for s in others:
                cells.append(f"{c['tok_s'] / row[s]['tok_s']:.2f}" if c and row.get(s) else "-")
            for s in servers:
                x = row.get(s)
                cells.append(f"{x['ttft_median'] * 1000:.0f} ({x['ttft_p90'] * 1000:.0f})" if x else "-")
            for s in others:
                x = row.get(s)
                cells.append(f"{sum(a != b for a, b in zip(c['texts'], x['texts'], strict=True))}/{len(c['texts'])}"
                             if c and x else "-")  # fmt: skip
            print("| " + " | ".join(cells) + " |")
    if report["stall"]:
        print()
        print(f"Stall: a stream's gaps between tokens while a {args.stall_tokens}-token prompt arrives")
        print()
        print("| model | server | median gap before (ms) | longest gap during (ms) | long prompt to first token (s) |")
        print("|:--|:--|--:|--:|--:|")
        for name, by_server in report["stall"].items():
            for s, st in by_server.items():
                print(f"| {name} | {s} | {st['gap_median_before'] * 1000:.0f} | {st['gap_max_during'] * 1000:.0f} | "
                      f"{st['long_prompt_seconds']:.2f} |")


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


if __name__ == "__main__":
    main()
