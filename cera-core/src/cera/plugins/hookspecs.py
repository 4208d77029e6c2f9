"""The hooks a cera plugin can implement.

A plugin is a module named by an entry point in the group ``cera``::

    [project.entry-points.cera]
    my-family = "cera_model_myfamily.plugin"

The module declares the plugin-API versions it supports and implements one or more of
the hooks below, each decorated with ``cera.hookimpl``. Each hook receives a
``register`` callback; call it once per thing the plugin provides. Registrations are
cheap declarations (names, architecture strings, supported types, and a ``"module:attr"``
factory string): nothing heavy is imported until cera calls the factory.

Example (a complete plugin module)::

    import cera

    CERA_PLUGIN_API = ">=2,<3"

    @cera.hookimpl
    def cera_register_models(register):
        register(cera.ModelFamily(
            name="myfamily",
            architectures=("myarch",),
            factory="cera_model_myfamily.model:MyModel",
        ))
"""

from __future__ import annotations

import pluggy

PROJECT = "cera"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def cera_register_backends(register):
    """Declare compute backends.

    Call ``register(cera.BackendSpec(...))`` for each backend::

        @cera.hookimpl
        def cera_register_backends(register):
            register(cera.BackendSpec(
                name="cpu",
                factory="cera_backend_cpu.backend:CpuBackend",
                tensor_types=("F32", "F16", "Q4_0", "Q8_0"),
                ops=("embedding", "linear", "rms_norm", ...),
                priority=0,
            ))
    """


@hookspec
def cera_register_models(register):
    """Declare model families, each with the GGUF ``general.architecture`` strings it serves.

    Call ``register(cera.ModelFamily(...))``::

        @cera.hookimpl
        def cera_register_models(register):
            register(cera.ModelFamily(name="llama", architectures=("llama", "mistral"),
                                      factory="cera_model_llama.model:LlamaModel"))
    """


@hookspec
def cera_register_audio(register):
    """Declare audio components (voice activity detection, keyword spotting, ...).

    Call ``register(cera.AudioComponent(...))``::

        @cera.hookimpl
        def cera_register_audio(register):
            register(cera.AudioComponent(name="silero-vad", kind="vad",
                                         architectures=("silero-vad",),
                                         factory="cera_audio_vad.silero:SileroVad"))
    """


@hookspec
def cera_register_commands(register):
    """Add commands to the ``cera`` CLI.

    Call ``register(command)`` with a ``click.Command``; keep heavy imports inside the
    command's callback so that ``cera --help`` stays fast::

        @cera.hookimpl
        def cera_register_commands(register):
            import click

            @click.command()
            def hello():
                "Say hello."
                click.echo("hello")

            register(hello)
    """
