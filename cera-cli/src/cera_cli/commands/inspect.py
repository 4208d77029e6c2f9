"""`cera inspect -m FILE`: what a GGUF file holds and which installed plugins can run it.

The file's header and the plugin declarations say most of it. To say which backends can
run the file, inspect asks the loader's own admission check (`cera.engine.admission`),
which needs the ops of the model's graphs: it imports the family (never a backend) and
builds them symbolically. When the family is missing or broken, inspect still describes
the file and says why. With ``--probe`` (and only then) it also starts each backend that
could run the file and reports its device, which is how it can say which backend
``--device auto`` picks: auto passes over a GPU backend whose adapter is software-emulated
(Mesa's lavapipe, say), which only a started backend can tell.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import click


def resolve_model(source: str) -> Path:
    """A model file from any source `cera run -m` takes (`cera.sources.resolve`: a path, a folder
    holding one GGUF, a bundle name, a Hugging Face repo). A file that exists is inspected
    whatever it holds: saying what is wrong with it is inspect's job."""
    from cera.sources import resolve

    path = Path(source).expanduser()
    if path.is_file():
        return path
    return resolve(source).path


def _family(manager, architecture: str | None) -> tuple[dict | None, str | None]:
    """The family serving `architecture` as a JSON object, or None and the reason."""
    from cera.errors import UnsupportedArchitecture

    if architecture is None:
        return None, "the file has no general.architecture, so no family can be chosen for it"
    try:
        family = manager.family_for(architecture)
    except UnsupportedArchitecture as e:
        return None, str(e)
    plugin = manager.plugin_of("family", family.name)
    record = next((r for r in manager.records if r.name == plugin), None)
    return {
        "name": family.name,
        "plugin": plugin,
        "distribution": record.distribution if record else None,
        "version": record.version if record else None,
    }, None


def _model_ops(manager, gguf) -> tuple[set[str] | None, str | None, dict | None]:
    """The ops of the file's model (its family imported, graphs built symbolically), and the
    bytes a token takes in its attention caches per KV cache type (None: it has none)."""
    from cera.engine import model_ops, read_model
    from cera.errors import CeraError
    from cera.kv_types import KV_TYPE_NAMES, check_dim
    from cera.state import kv_cell_bytes

    try:
        _, model, _ = read_model(gguf, manager)
        ops = model_ops(model)
    except CeraError as e:
        return None, str(e), None
    kv = [d for d in model.state if d.kind == "kv"]
    cells = None
    if kv:
        cells = {t: kv_cell_bytes(model.state, t) for t in KV_TYPE_NAMES
                 if not any(check_dim(t, d.k_dim) or check_dim(t, d.v_dim) for d in kv)}  # fmt: skip
    return ops, None, cells


def _backends(manager, gguf, ops) -> list[dict]:
    """For each installed backend: usable here or not, the first tensor it cannot serve,
    and the loader's admission answer (types and ops)."""
    from cera.engine import admission

    out = []
    for name, spec in sorted(manager.backends.items(), key=lambda kv: (-kv[1].priority, kv[0])):
        supported = set(spec.tensor_types)
        first = next((t for t in gguf.tensors.values() if t.type_name not in supported), None)
        unserved = None
        if first is not None:
            unserved = {
                "tensor": first.name,
                "type": first.type_name,
                "reason": f"backend {name!r} has no kernel for {first.type_name}",
            }
        reason = spec.unavailable_reason()
        out.append(
            {
                "name": name,
                "plugin": manager.plugin_of("backend", name),
                "usable": reason is None,
                "unavailable_reason": reason,
                "tensor_types": list(spec.tensor_types),
                "serves_all_tensors": first is None,
                "first_unserved": unserved,
                "admission": admission(spec, gguf, ops),
            }
        )
    return out


def _probe(manager, backends: list[dict]) -> str | None:
    """Start each backend the loader would admit and record its device (``probe``); return
    the one ``--device auto`` picks: the first admitted backend that starts, reports itself
    usable and is not a software-emulated device (as `cera.engine.choose_backend`)."""
    from cera.plugins.registry import load_factory

    chosen = None
    for b in backends:
        if b["admission"] is not None:
            continue
        spec = manager.backends[b["name"]]
        try:
            backend = load_factory(spec.factory)()
            try:
                info = backend.probe()
            finally:
                backend.close()
        except Exception as e:  # noqa: BLE001 - reported, as auto would pass over it
            b["probe"] = {"error": f"starting it failed: {type(e).__name__}: {e}"}
            continue
        b["probe"] = {"device": info.device, "usable": info.usable, "software": info.software, "reason": info.reason,
                      "memory_bytes": info.memory_bytes}  # fmt: skip
        if chosen is None and info.usable and not info.software:
            chosen = b["name"]
    return chosen


def inspect_report(path: Path, manager, probe: bool = False) -> dict:
    """The JSON document of `cera inspect --json` (``probe``: with each admitted backend's
    device and the backend ``--device auto`` picks)."""
    from cera.formats.gguf import GGUFFile

    with GGUFFile(path) as g:
        meta = g.metadata
        architecture = meta.get("general.architecture")
        if not isinstance(architecture, str) or not architecture:
            architecture = None
        counts: Counter[str] = Counter()
        nbytes: Counter[str] = Counter()
        for t in g.tensors.values():
            counts[t.type_name] += 1
            nbytes[t.type_name] += t.nbytes
        tokens = g.get_array("tokenizer.ggml.tokens", str)
        family, family_error = _family(manager, architecture)
        ops, model_error, kv_cell = _model_ops(manager, g) if family else (None, None, None)
        backends = _backends(manager, g, ops)
        auto = _probe(manager, backends) if probe else None
        return {
            "path": str(path),
            "file_size": g.file_size,
            "gguf_version": g.version,
            "architecture": architecture,
            "name": g.name,
            "file_type": _file_type_name(meta.get("general.file_type")),
            "parameters": g.parameter_count(),
            "context_length": _int_or_none(meta.get(f"{architecture}.context_length")) if architecture else None,
            "block_count": _int_or_none(meta.get(f"{architecture}.block_count")) if architecture else None,
            "tokenizer": meta.get("tokenizer.ggml.model"),
            "tokenizer_pre": meta.get("tokenizer.ggml.pre"),
            "vocab_size": len(tokens) if isinstance(tokens, list) else None,
            "chat_template": isinstance(meta.get("tokenizer.chat_template"), str),
            "tool_call_format": _tool_format(architecture, meta.get("tokenizer.chat_template")),
            "tensor_count": len(g.tensors),
            "tensor_types": {
                name: {"count": counts[name], "bytes": nbytes[name]} for name in sorted(counts, key=lambda n: -nbytes[n])
            },
            "family": family,
            "family_error": family_error,
            "model_error": model_error,
            "ops": sorted(ops) if ops is not None else None,
            # Bytes one token takes in the attention caches, per KV cache type the model can use.
            "kv_bytes_per_token": kv_cell,
            "backends": backends,
            # Backends the loader would admit, best first (the --device auto order).
            "runs_on": [b["name"] for b in backends if b["admission"] is None],
            # With --probe: the backend --device auto picks (None: none it would take).
            **({"auto": auto} if probe else {}),
        }


def _tool_format(architecture, template) -> dict:
    """How the model writes tool calls (cera.tools): from the template's markers, else the
    architecture's usual format when the template renders tools, else the generic JSON one."""
    from cera.tools import format_for

    fmt = format_for(architecture=architecture or "", template=template if isinstance(template, str) else "")
    return {"name": fmt.name, "description": fmt.description}


def _int_or_none(v):
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def _file_type_name(v) -> str | None:
    if not isinstance(v, int):
        return None
    from gguf.constants import LlamaFileType

    try:
        return LlamaFileType(v).name.removeprefix("MOSTLY_")
    except ValueError:
        return f"unknown ({v})"


def _human_bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError


def _human_count(n: int) -> str:
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.1f}{unit} ({n:,})"
    return str(n)


def _print_report(r: dict) -> None:
    def row(label, value):
        click.echo(f"{label:<14}{value}")

    row("file", f"{r['path']} ({_human_bytes(r['file_size'])}, GGUF v{r['gguf_version']})")
    row("architecture", r["architecture"] or "(none: general.architecture is missing)")
    row("name", r["name"] or "-")
    if r["file_type"]:
        row("file type", r["file_type"])
    row("parameters", _human_count(r["parameters"]))
    row("context", r["context_length"] if r["context_length"] is not None else "-")
    tok = r["tokenizer"] or "(none)"
    if r["tokenizer_pre"]:
        tok += f", pre-tokenizer {r['tokenizer_pre']}"
    if r["vocab_size"] is not None:
        tok += f", {r['vocab_size']:,} tokens"
    row("tokenizer", tok)
    row("chat template", "present" if r["chat_template"] else "none")
    tf = r["tool_call_format"]
    row("tool calls", tf["description"] + ("" if tf["name"] != "generic" else " (cera describes the tools to the model)"))
    row("tensors", str(r["tensor_count"]))
    for type_name, v in r["tensor_types"].items():
        click.echo(f"  {type_name:<8}{v['count']:>6}  {_human_bytes(v['bytes']):>10}")
    if r["family"]:
        f = r["family"]
        origin = f"plugin {f['plugin']}" + (f", {f['distribution']} {f['version']}" if f["distribution"] else "")
        row("family", f"{f['name']} ({origin})")
    else:
        row("family", f"none: {r['family_error']}")
    if r.get("model_error"):
        row("model", f"cannot be built: {r['model_error']}")
    if r.get("kv_bytes_per_token"):
        row("KV cache", ", ".join(f"{t} {n:,} B" for t, n in r["kv_bytes_per_token"].items()) + " a token")
    if not r["backends"]:
        from cera.plugins.distributions import no_backend_hint
        from cera_cli.main import plugin_manager

        row("backends", f"none loaded: {no_backend_hint(plugin_manager().allow == set())}")
        return
    runs = ", ".join(r["runs_on"]) + " can run it" if r["runs_on"] else "no installed backend can run it"
    if "auto" in r and r["runs_on"]:
        runs += f"; --device auto picks {r['auto']}" if r["auto"] else "; --device auto takes none of them"
    row("backends", runs)
    width = max(len(b["name"]) for b in r["backends"]) + 2
    for b in r["backends"]:
        notes = []
        if not b["usable"]:
            notes.append(f"not usable here: {b['unavailable_reason']}")
        if b["serves_all_tensors"]:
            notes.append("serves every tensor")
        else:
            u = b["first_unserved"]
            notes.append(f"cannot serve tensor {u['tensor']!r}: {u['reason']}")
        if b["usable"] and b["serves_all_tensors"] and b["admission"]:
            notes.append(b["admission"])
        p = b.get("probe")
        if p and "error" in p:
            notes.append(p["error"])
        elif p:
            notes.append(f"device {p['device']}" + ("" if p["usable"] else f", unusable: {p['reason']}"))
            if p["software"]:
                notes.append(f"software-emulated: --device auto passes over it (--device {b['name']} uses it)")
        click.echo(f"  {b['name']:<{width}}{'; '.join(notes)}")


@click.command("inspect")
@click.option(
    "-m",
    "--model",
    "source",
    default=None,
    metavar="FILE",
    help="What `cera run -m` takes: a GGUF file, a folder holding one, a bundle name (`cera models`), "
    "or a Hugging Face repo (org/repo[@REV][:QUANT]). Default: the default model, as `cera run`.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object instead of text.")
@click.option(
    "--probe",
    is_flag=True,
    help="Also start each backend that could run the file: its device, and which one --device auto picks "
    "(auto passes over a software-emulated GPU).",
)
def inspect_cmd(source: str, as_json: bool, probe: bool) -> None:
    """Describe a GGUF file: architecture, tensors, which plugins can run it.

    Reads the file's header and builds the model's graphs symbolically (no weights are
    read, no backend is loaded) to tell which backends the loader would admit; --probe
    starts those backends to report their devices.
    """
    from cera_cli.main import plugin_manager

    from cera.sources import bundles

    report = inspect_report(resolve_model(source or bundles.DEFAULT_MODEL), plugin_manager(), probe=probe)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        _print_report(report)
