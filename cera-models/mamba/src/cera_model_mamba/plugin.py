"""Registers the Mamba-2 families. Cheap: imports nothing but cera's declarations."""

import cera

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_models(register):
    register(cera.ModelFamily(name="mamba2", architectures=("mamba2",), factory="cera_model_mamba.mamba2:Mamba2Model"))
    register(cera.ModelFamily(name="granitehybrid", architectures=("granitehybrid",),
                              factory="cera_model_mamba.granitehybrid:GraniteHybridModel"))  # fmt: skip
    register(cera.ModelFamily(name="falcon-h1", architectures=("falcon-h1",),
                              factory="cera_model_mamba.falconh1:FalconH1Model"))  # fmt: skip
