"""The `cera` entry point: a click group whose commands load lazily.

Built-in commands are named here with the module that defines them, so `cera --help`
imports none of them (and no backend or model code). Plugin commands come from the
`cera_register_commands` hook.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

import click

from cera.plugins import manager as _plugins

# name -> "module:attr" of a click command; imported only when the command runs or shows help.
BUILTIN_COMMANDS = {
    "plugins": "cera_cli.commands.plugins:plugins",
    "inspect": "cera_cli.commands.inspect:inspect_cmd",
    "tokenize": "cera_cli.commands.tokenize:tokenize_cmd",
    "template": "cera_cli.commands.template:template_cmd",
    "run": "cera_cli.commands.run:run_cmd",
    "chat": "cera_cli.commands.chat:chat_cmd",
    "bench": "cera_cli.commands.bench:bench_cmd",
    "perplexity": "cera_cli.commands.perplexity:perplexity_cmd",
    "embed": "cera_cli.commands.embed:embed_cmd",
    "models": "cera_cli.commands.models:models_cmd",
    "pull": "cera_cli.commands.models:pull_cmd",
    "rm": "cera_cli.commands.disk:rm_cmd",
    "bundles": "cera_cli.commands.hub:bundles_cmd",
    "quantize": "cera_cli.commands.hub:quantize_cmd",
}

# One-line help for the listing, so `cera --help` needn't import every command module.
BUILTIN_HELP = {
    "plugins": "List installed plugins and what each registered.",
    "inspect": "Describe a GGUF file: architecture, tensors, which plugins can run it.",
    "tokenize": "Tokenize text with a model's tokenizer.",
    "template": "Render a model's chat template for a list of messages.",
    "run": "Generate text from a prompt.",
    "chat": "Chat interactively with a model.",
    "bench": "Measure prompt processing and decode speed.",
    "perplexity": "Perplexity of a text, as llama-perplexity computes it (per KV cache type).",
    "embed": "Embed texts: one vector per text (or per token).",
    "models": "List the known model bundles: size, licence, cached, kind.",
    "pull": "Fetch a model bundle into the cache, with a progress bar.",
    "rm": "Remove fetched models from disk (`cera models --disk` lists them).",
    "bundles": "Model bundles of the catalogue: `cera bundles list`.",
    "quantize": "Convert a GGUF file, a SafeTensors folder or a Hub repo to a quantized GGUF.",
}


# A plugin registering a command named like a built-in one is reported as a conflict rather
# than silently hidden. Reserved at import, before any command can load the plugins.
_plugins.reserve("command", BUILTIN_COMMANDS, holder="cera-cli (a built-in command)")


def plugin_manager():
    """The process-wide plugin manager (built-in command names reserved)."""
    return _plugins.get_manager()


def _disable_plugins() -> None:
    """`--no-plugins`: from now on this process sees an empty plugin manager."""
    _plugins.set_manager(_plugins.PluginManager(allow=set()))


def _plugin_commands(timeout: float | None = None, third_party_timeout: float | None = None) -> dict:
    return _plugins.get_manager(timeout, third_party_timeout).commands


# `cera --help` lists plugin commands, which needs their plugins imported (in parallel). It
# waits up to HELP_PLUGIN_WAIT_S for cera's own plugins (about a millisecond each) but only
# HELP_THIRD_PARTY_WAIT_S for other distributions' and names the slower ones as not listed,
# so a plugin that takes seconds to import cannot make the help slow.
# CERA_HELP_PLUGIN_WAIT (seconds) lengthens the second wait, for a slow plugin whose commands
# should be listed anyway (and for tests on a loaded machine).
HELP_PLUGIN_WAIT_S = 0.15
HELP_THIRD_PARTY_WAIT_S = 0.04


def _help_third_party_wait() -> float:
    raw = os.environ.get("CERA_HELP_PLUGIN_WAIT", "")
    try:
        return max(0.0, float(raw)) if raw else HELP_THIRD_PARTY_WAIT_S
    except ValueError:
        return HELP_THIRD_PARTY_WAIT_S  # a bad value must not break the help; `cera plugins` still waits


def _help_plugin_commands() -> dict:
    """Plugin commands as the help lists them (the waits above)."""
    third = _help_third_party_wait()
    return _plugin_commands(max(HELP_PLUGIN_WAIT_S, third), third)


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        names = [n for n in BUILTIN_COMMANDS if _exists(n)]
        names += [n for n in _help_plugin_commands() if n not in BUILTIN_COMMANDS]
        return sorted(names)

    def get_command(self, ctx, name):
        if name in BUILTIN_COMMANDS:
            module, _, attr = BUILTIN_COMMANDS[name].partition(":")
            try:
                return _accept_no_plugins(getattr(importlib.import_module(module), attr))
            except ModuleNotFoundError as e:
                if e.name == module:
                    return None
                raise
        return _accept_no_plugins(_plugin_commands().get(name))

    def format_commands(self, ctx, formatter):
        rows = []
        plugin_cmds = _help_plugin_commands()
        for name in self.list_commands(ctx):
            if name in BUILTIN_COMMANDS:
                rows.append((name, BUILTIN_HELP.get(name, "")))
            else:
                cmd = plugin_cmds[name]
                rows.append((name, cmd.get_short_help_str(limit=60)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
        slow = [r.name for r in _plugins.get_manager().records if r.error and "did not finish within" in r.error]
        if slow:
            formatter.write_paragraph()
            formatter.write_text(
                f"Not listed: the commands of plugin(s) {', '.join(slow)}, still importing after "
                f"{_help_third_party_wait():g} s (`cera plugins` waits for them and says more)."
            )


def _accept_no_plugins(cmd):
    """Let `--no-plugins` stand after the command name too (`cera run --no-plugins ...`), as
    people type it. main() has already acted on it wherever it stands; here the command (and
    a group's subcommands) only has to accept the word instead of calling it unknown."""
    if cmd is None or any(p.name == "no_plugins" for p in cmd.params):
        return cmd
    cmd.params.append(
        click.Option(["--no-plugins"], is_flag=True, expose_value=False, hidden=True, help="Load no plugins.")
    )
    for sub in getattr(cmd, "commands", {}).values():
        _accept_no_plugins(sub)
    return cmd


def _exists(name: str) -> bool:
    module = BUILTIN_COMMANDS[name].partition(":")[0]
    return importlib.util.find_spec(module) is not None


def _version() -> str:
    import cera

    return cera.__version__


def _print_versions(ctx, param, value):
    """`cera --version`: the CLI's version, then every installed distribution of cera (the
    core, the CLI, each plugin's): what a bug report needs. Reads metadata only."""
    if not value or ctx.resilient_parsing:
        return
    from cera.plugins.distributions import all_installed, installed_version

    click.echo(f"cera {installed_version('cera-cli') or '?'}")
    for name, version in all_installed():
        click.echo(f"  {name} {version}")
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    is_eager=True,
    expose_value=False,
    callback=_print_versions,
    help="Show the versions of cera and of every installed cera distribution, and exit.",
)
@click.option(
    "--no-plugins",
    is_flag=True,
    is_eager=True,  # before --help lists the commands, and before a plugin command is looked up
    expose_value=False,
    callback=lambda ctx, param, value: _disable_plugins() if value else None,
    help="Load no plugins (same as CERA_PLUGINS=''); for diagnosing a broken install.",
)
def cli():
    """cera: run GGUF language and speech models locally, with plugins for models,
    backends and audio components."""


def main(argv=None):
    from cera.errors import CeraError

    # `--no-plugins` must take effect before plugin commands are listed, whatever the order of
    # the options; child processes (workers) inherit it through the environment.
    args = sys.argv[1:] if argv is None else list(argv)
    if "--no-plugins" in args[: args.index("--") if "--" in args else len(args)]:
        os.environ["CERA_PLUGINS"] = ""
        _disable_plugins()
    try:
        # With standalone_mode=False click returns ctx.exit()'s code instead of exiting.
        rv = cli.main(args=args, prog_name="cera", standalone_mode=False)
        if isinstance(rv, int) and not isinstance(rv, bool) and rv:
            sys.exit(rv)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except CeraError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(getattr(e, "exit_status", 1))  # 3: -n below the grammar's shortest value (GrammarBudgetError)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)


if __name__ == "__main__":
    main()
