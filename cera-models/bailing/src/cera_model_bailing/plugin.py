"""Registers the bailing family. Cheap: imports nothing but cera's declarations."""

import cera

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_models(register):
    register(
        cera.ModelFamily(
            name="bailingmoe3", architectures=("bailingmoe3",), factory="cera_model_bailing.bailingmoe3:BailingMoe3Model"
        )
    )
