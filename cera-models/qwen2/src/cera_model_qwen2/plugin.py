"""Registers the qwen2 family. Cheap: imports nothing but cera's declarations."""

import cera

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_models(register):
    register(cera.ModelFamily(name="qwen2", architectures=("qwen2",), factory="cera_model_qwen2.qwen2:Qwen2Model"))
