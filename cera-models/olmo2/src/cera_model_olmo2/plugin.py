"""Registers the olmo2 family. Cheap: imports nothing but cera's declarations."""

import cera

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_models(register):
    register(cera.ModelFamily(name="olmo2", architectures=("olmo2",), factory="cera_model_olmo2.olmo2:Olmo2Model"))
