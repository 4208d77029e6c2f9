"""Registers the qwen3 family. Cheap: imports nothing but cera's declarations."""

import cera

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_models(register):
    register(cera.ModelFamily(name="qwen3", architectures=("qwen3",), factory="cera_model_qwen3.qwen3:Qwen3Model"))
    register(
        cera.ModelFamily(name="qwen3moe", architectures=("qwen3moe",), factory="cera_model_qwen3.qwen3moe:Qwen3MoeModel")
    )
