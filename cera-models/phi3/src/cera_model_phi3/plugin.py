"""Registers the phi3 family. Cheap: imports nothing but cera's declarations."""

import cera

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_models(register):
    register(cera.ModelFamily(name="phi3", architectures=("phi3",), factory="cera_model_phi3.phi3:Phi3Model"))
    register(cera.ModelFamily(name="phi2", architectures=("phi2",), factory="cera_model_phi3.phi2:Phi2Model"))
