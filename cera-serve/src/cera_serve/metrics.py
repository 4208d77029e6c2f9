"""Prometheus metrics of the server: requests by route and status, tokens, the queue, and
latency histograms (request, time to first token), in the text exposition format."""

from __future__ import annotations

import threading

BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, float("inf"))


class Histogram:
    def __init__(self):
        self.counts = [0] * len(BUCKETS)
        self.total = 0.0
        self.n = 0

    def observe(self, v: float) -> None:
        for i, b in enumerate(BUCKETS):
            if v <= b:
                self.counts[i] += 1
        self.total += v
        self.n += 1

    def render(self, name: str, labels: str = "") -> list[str]:
        out = []
        for b, c in zip(BUCKETS, self.counts, strict=True):
            le = "+Inf" if b == float("inf") else repr(b)
            sep = "," if labels else ""
            out.append(f'{name}_bucket{{{labels}{sep}le="{le}"}} {c}')
        lab = f"{{{labels}}}" if labels else ""
        out += [f"{name}_sum{lab} {self.total}", f"{name}_count{lab} {self.n}"]
        return out


class Metrics:
    def __init__(self):
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = {}
        self.latency: dict[str, Histogram] = {}
        self.ttft = Histogram()
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.running = 0
        self.rejected = 0
        self.drafted = 0  # draft-model tokens verified, and accepted (speculative decoding)
        self.accepted = 0

    def request(self, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(route, status)] = self.requests.get((route, status), 0) + 1
            self.latency.setdefault(route, Histogram()).observe(seconds)

    def tokens(self, prompt: int, completion: int) -> None:
        with self._lock:
            self.prompt_tokens += prompt
            self.completion_tokens += completion

    def drafts(self, drafted: int, accepted: int) -> None:
        with self._lock:
            self.drafted += drafted
            self.accepted += accepted

    def started(self) -> None:
        # sequences start and end in their own worker threads; += alone is not atomic
        with self._lock:
            self.running += 1

    def ended(self) -> None:
        with self._lock:
            self.running -= 1

    def first_token(self, seconds: float) -> None:
        with self._lock:
            self.ttft.observe(seconds)

    def render(self, server) -> str:
        with self._lock:
            lines = [
                "# HELP cera_requests_total Requests by route and HTTP status.",
                "# TYPE cera_requests_total counter",
            ]
            for (route, status), n in sorted(self.requests.items()):
                lines.append(f'cera_requests_total{{route="{route}",status="{status}"}} {n}')
            lines += ["# HELP cera_request_seconds Request latency (streams: until the last byte).",
                      "# TYPE cera_request_seconds histogram"]  # fmt: skip
            for route, h in sorted(self.latency.items()):
                lines += h.render("cera_request_seconds", f'route="{route}"')
            lines += ["# HELP cera_time_to_first_token_seconds Time to the first streamed token.",
                      "# TYPE cera_time_to_first_token_seconds histogram", *self.ttft.render("cera_time_to_first_token_seconds")]  # fmt: skip
            lines += [
                "# TYPE cera_prompt_tokens_total counter", f"cera_prompt_tokens_total {self.prompt_tokens}",
                "# TYPE cera_completion_tokens_total counter", f"cera_completion_tokens_total {self.completion_tokens}",
                "# TYPE cera_sequences_running gauge", f"cera_sequences_running {self.running}",
                "# TYPE cera_requests_waiting gauge", f"cera_requests_waiting {server.waiting}",
                "# TYPE cera_requests_rejected_total counter", f"cera_requests_rejected_total {self.rejected}",
                "# HELP cera_draft_tokens_total Draft tokens verified (speculative decoding).",
                "# TYPE cera_draft_tokens_total counter", f"cera_draft_tokens_total {self.drafted}",
                "# HELP cera_draft_tokens_accepted_total Draft tokens accepted.",
                "# TYPE cera_draft_tokens_accepted_total counter", f"cera_draft_tokens_accepted_total {self.accepted}",
            ]  # fmt: skip
        return "\n".join(lines) + "\n"
