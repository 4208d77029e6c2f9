"""``cera hexagon-compile``: build a model's HTP context binaries ahead of time.

It compiles the graphs a greedy generation uses (the prompt pass of each ``--prompt-tokens``
length, and the decode step returning an argmax or the logits) for ``--soc`` and a context
of ``--ctx`` cells, into cera's cache folder, where `--device hexagon` finds them. On an x86
machine the compiler is the one QNN's simulator ships with; the binaries are those a
Snapdragon runs (copy ``$CERA_CACHE_DIR/hexagon/`` to the device).
"""

from __future__ import annotations

import json
import os
import platform

import click


def hexagon_compile(model, soc, n_ctx, prompt_tokens, as_json):
    """What the command does (its options are declared in plugin.py, which stays cheap)."""
    import cera
    from cera.errors import CeraError
    from cera.graph.builder import ARGMAX, LAST_LOGITS, Layout

    try:
        lengths = sorted({int(x) for x in prompt_tokens.split(",") if x.strip()})
    except ValueError:
        raise click.BadParameter(f"--prompt-tokens wants comma-separated integers, got {prompt_tokens!r}") from None
    saved = os.environ.get("CERA_HEXAGON_TARGET")
    if platform.machine().lower() in ("x86_64", "amd64") and not saved:
        os.environ["CERA_HEXAGON_TARGET"] = "simulator"  # the x86 copy of QNN compiles for any SoC
    try:
        from .target import resolve_soc

        soc_name = resolve_soc(soc).name
        loaded = cera.load(model, device="hexagon", quiet=True, soc=soc_name)
        try:
            state = loaded.runner.new_state(n_ctx)
            shapes = [(Layout((n,)), LAST_LOGITS) for n in lengths if 1 < n <= n_ctx]
            shapes += [(Layout((1,)), ARGMAX), (Layout((1,)), LAST_LOGITS)]
            for layout, outputs in shapes:
                loaded.runner.executable(layout, outputs, state)
            stats = list(loaded.backend.stats)
        finally:
            loaded.close()
    except CeraError as e:
        raise click.ClickException(str(e)) from None
    finally:
        if saved is None:
            os.environ.pop("CERA_HEXAGON_TARGET", None)
    if as_json:
        click.echo(json.dumps(stats, indent=1))
        return
    for s in stats:
        how = "cached" if s.get("cached") else f"compiled in {s.get('compile_s')} s"
        click.echo(
            f"{soc_name} v{s.get('htp_arch')}: {s.get('tokens')} token(s) -> {', '.join(s.get('outputs', []))}: {how}, "
            f"context binary {s.get('context_bytes', 0) / 1e6:.1f} MB"
        )
