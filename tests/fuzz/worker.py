"""The fuzz worker: imports cera once, then runs each case in a forked child under a time
and memory limit, and says what happened.

Protocol: one JSON object per line on stdin (a case), one JSON object per line on stdout
(its outcome). A case is {"kind": "gguf" | "template" | "tokenize", ..., "timeout": s,
"memory": bytes}. The outcome is {"outcome": ..., "detail": ..., "peak_mb": ...} where
outcome is one of

- "ok": the code under test finished;
- "cera": it raised a `CeraError` (detail: class and message);
- "exception": it raised anything else (detail: the traceback) - a bug;
- "memory": a MemoryError happened, even one turned into a CeraError - a memory blow-up;
- "timeout": the child was still running at the time limit - a hang;
- "crash": the child died without reporting (a signal: a segfault, the kernel's OOM
  killer) - a bug.

Forking from a process that has done every import keeps a case at tens of milliseconds
instead of a second of interpreter start. The worker must hold no threads when it forks
(BLAS thread pools are disabled before numpy loads; the plugins' import threads have
finished), so each child starts single-threaded.
"""

from __future__ import annotations

import json
import os
import re
import resource
import select
import signal
import sys
import time
import traceback

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hello there, how are you?"},
    {"role": "assistant", "content": "Fine."},
    {"role": "user", "content": "Tell me a joke about GGUF files. 🙂"},
]
TEXTS = ["Hello world", " leading space and\ttabs\nnew lines", "中文 🙂 é", "<|im_start|>user\nhi<|im_end|>", ""]


def _prepare() -> None:
    """Everything a case needs imported, before the first fork."""
    import numpy  # noqa: F401

    import cera
    import cera.text.chat_template  # noqa: F401
    import cera.engine  # noqa: F401
    import cera.generation.session  # noqa: F401
    from cera.plugins.manager import get_manager
    from cera.plugins.registry import load_factory

    m = get_manager()
    for spec in m.backends.values():  # the kernels' modules, so children need not import them
        if spec.name == "cpu":
            load_factory(spec.factory)
    for fam in m.families.values():
        try:
            load_factory(fam.factory)
        except Exception:  # noqa: BLE001 - a family that cannot import is the case's business
            pass
    try:
        from cera_cli.commands import inspect  # noqa: F401
    except ImportError:
        pass


def _memory_error_in(e: BaseException | None) -> bool:
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, MemoryError):
            return True
        e = e.__cause__ or e.__context__
    return False


# -- what a case does ---------------------------------------------------------------------------


def _gguf(case: dict) -> str:
    from cera.formats.gguf import GGUFFile

    path = case["path"]
    mode = case.get("mode", "open")
    if mode == "open":
        with GGUFFile(path) as g:
            for name in g.tensors:
                g.tensor_data(name).sum() if g.tensors[name].nbytes < 1 << 16 else g.tensor_data(name)
            _ = g.architecture
        return "opened"
    if mode == "inspect":
        from cera.plugins.manager import get_manager
        from cera_cli.commands.inspect import inspect_report

        inspect_report(path, get_manager())
        return "inspected"
    # "run": what `cera run` and `cera chat` do with a file
    import cera

    model = cera.load(path, device="cpu", threads=1)
    try:
        for text in TEXTS:
            ids = model.tokenize(text, add_special=True, parse_special=True)
            model.detokenize(ids)
        try:
            model.chat_template.render(MESSAGES, add_generation_prompt=True)
        except cera.TemplateError:
            pass  # a broken template leaves raw prompts working: go on
        session = model.new_session(n_ctx=min(256, max(8, model.default_n_ctx())))
        session.append_text("The capital of France is")
        s1 = session.generate(max_tokens=3, temperature=0)
        s2 = session.generate(max_tokens=2, temperature=0.8, seed=1, logprobs=True)
        return f"ran: {s1.finish_reason.value}, {s2.finish_reason.value}"
    finally:
        model.close()


def _template(case: dict) -> str:
    from cera.text.chat_template import ChatTemplate
    from cera.text.template_budget import TemplateBudget

    budget = TemplateBudget(seconds=case.get("budget_s", 0.5), compile_seconds=case.get("budget_s", 0.5) * 4)
    out = ChatTemplate(case["source"], budget=budget).render(case.get("messages", MESSAGES), **case.get("extra", {}))
    if re.search(r" at 0x[0-9a-fA-F]{6,}", out):
        raise AssertionError(f"the rendered prompt shows a memory address: {out[:200]!r}")
    return f"rendered {len(out)} characters"


def _tokenize(case: dict) -> str:
    from cera.formats.gguf import GGUFFile
    from cera.text.tokenizer import Tokenizer

    with GGUFFile(case["path"]) as g:
        tok = Tokenizer.from_gguf(g)
    text = case["text"]
    ids = tok.encode(text, add_special=case.get("add_special", True), parse_special=case.get("parse_special", False))
    tok.decode(ids)
    d = tok.detokenizer()
    for i in ids[:2000]:
        d.feed(i)
    d.flush()
    return f"{len(ids)} tokens"


KINDS = {"gguf": _gguf, "template": _template, "tokenize": _tokenize}


def _child(case: dict, w: int) -> None:
    """Runs in the forked child: limits, the case, the report; never returns."""
    code = 0
    try:
        limit = int(case.get("memory", 0))
        if limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        from cera.errors import CeraError

        try:
            detail = KINDS[case["kind"]](case)
            result = {"outcome": "ok", "detail": detail}
        except CeraError as e:
            cause = e.__cause__
            if _memory_error_in(e):
                result = {"outcome": "memory", "detail": f"{type(e).__name__}: {e}"}
            elif type(e).__name__ == "GenerationError" and cause is not None and not isinstance(cause, CeraError):
                # an unexpected exception that the generation loop wrapped: still a bug
                detail = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
                result = {"outcome": "exception", "detail": detail[-4000:]}
            else:
                result = {"outcome": "cera", "detail": f"{type(e).__name__}: {str(e)[:500]}"}
        except MemoryError:
            result = {"outcome": "memory", "detail": traceback.format_exc()[-3000:]}
        except BaseException as e:  # noqa: BLE001 - every other outcome is the finding
            kind = "memory" if _memory_error_in(e) else "exception"
            result = {"outcome": kind, "detail": traceback.format_exc()[-4000:]}
        os.write(w, (json.dumps(result) + "\n").encode())
    except BaseException:  # noqa: BLE001
        code = 3
    finally:
        os._exit(code)


def run_case(case: dict) -> dict:
    r, w = os.pipe()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _child(case, w)
    os.close(w)
    timeout = float(case.get("timeout", 10))
    chunks = []
    deadline = t0 + timeout
    timed_out = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([r], [], [], left)
        if not ready:
            continue
        data = os.read(r, 65536)
        if not data:
            break
        chunks.append(data)
    if timed_out:
        os.kill(pid, signal.SIGKILL)
    _, status, usage = os.wait4(pid, 0)
    os.close(r)
    peak_mb = usage.ru_maxrss / 1024
    seconds = round(time.monotonic() - t0, 3)
    if timed_out:
        return {"outcome": "timeout", "detail": f"still running after {timeout} s", "peak_mb": peak_mb, "s": seconds}
    text = b"".join(chunks).decode(errors="replace").strip()
    if not text:
        why = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
        return {
            "outcome": "crash",
            "detail": f"the child died without a report ({why})",
            "peak_mb": peak_mb,
            "s": seconds,
        }
    result = json.loads(text.splitlines()[-1])
    result["peak_mb"] = peak_mb
    result["s"] = seconds
    return result


def vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    _prepare()
    print(json.dumps({"ready": True, "vm_size": vm_size()}), flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        case = json.loads(line)
        print(json.dumps(run_case(case)), flush=True)


if __name__ == "__main__":
    main()
