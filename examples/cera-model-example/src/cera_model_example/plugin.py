"""The plugin module: named by the `cera` entry point in pyproject.toml.

cera imports this module when it discovers plugins (for `cera plugins`, `cera --help`, and
before loading any model), so it must stay cheap: import `cera` only, never numpy or the
model module. What it registers is a declaration; the factory string is imported only
when a file of architecture "cera-example" is loaded.
"""

import cera

# The plugin-API versions this plugin works with (a PEP 440 specifier). A core providing
# another API version skips the plugin and `cera plugins` says why.
CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_models(register):
    register(
        cera.ModelFamily(
            name="example",
            architectures=("cera-example",),  # the GGUF general.architecture strings served
            factory="cera_model_example.model:ExampleModel",  # "module:attr", imported lazily
            description="a tiny pre-norm transformer, the template for third-party families",
        )
    )
