"""Registers the gated delta-net families. Cheap: imports nothing but cera's declarations."""

import cera

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_models(register):
    register(cera.ModelFamily(name="qwen35", architectures=("qwen35",), factory="cera_model_qwen35.qwen35:Qwen35Model"))
    register(cera.ModelFamily(name="qwen35moe", architectures=("qwen35moe",),
                              factory="cera_model_qwen35.qwen35moe:Qwen35MoeModel"))  # fmt: skip
    register(cera.ModelFamily(name="qwen3next", architectures=("qwen3next",),
                              factory="cera_model_qwen35.qwen3next:Qwen3NextModel"))  # fmt: skip
