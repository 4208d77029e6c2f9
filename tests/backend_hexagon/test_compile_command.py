"""``cera hexagon-compile`` builds a model's context binaries ahead of time; a second run and
a later `--device hexagon` find them in the cache."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import needs_simulator

TINY = Path(__file__).resolve().parent.parent / "models" / "reference" / "tiny"


def _command():
    """The command as the plugin registers it with the CLI."""
    from cera_backend_hexagon.plugin import cera_register_commands

    found = []
    cera_register_commands(found.append)
    [cmd] = found
    assert cmd.name == "hexagon-compile"
    return cmd


@needs_simulator
def test_hexagon_compile_prepares_and_reuses(simulator, hexagon_cache):
    from click.testing import CliRunner

    hexagon_compile = _command()
    args = ["-m", str(TINY / "tiny-mistral.gguf"), "--soc", "SM8550", "--ctx", "32", "--prompt-tokens", "4", "--json"]
    first = CliRunner().invoke(hexagon_compile, args)
    assert first.exit_code == 0, first.output
    built = json.loads(first.output)
    assert [(b["tokens"], b["cached"]) for b in built] == [(4, False), (1, False), (1, False)]
    assert all(b["soc"] == "SM8550" and b["htp_arch"] == 73 and b["context_bytes"] > 0 for b in built)
    assert all(Path(b["path"]).is_relative_to(hexagon_cache / "SM8550-v73") for b in built)
    again = json.loads(CliRunner().invoke(hexagon_compile, args).output)
    assert [b["cached"] for b in again] == [True, True, True]
    assert [b["path"] for b in again] == [b["path"] for b in built]


def test_an_unknown_soc_is_one_clear_error():
    from click.testing import CliRunner

    hexagon_compile = _command()
    r = CliRunner().invoke(hexagon_compile, ["-m", str(TINY / "tiny-mistral.gguf"), "--soc", "SM1234"])
    assert r.exit_code != 0 and "unknown Hexagon SoC 'SM1234'" in r.output
