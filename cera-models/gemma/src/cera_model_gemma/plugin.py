"""Registers the gemma family. Cheap: imports nothing but cera's declarations."""

import cera

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_models(register):
    register(cera.ModelFamily(name="gemma", architectures=("gemma",), factory="cera_model_gemma.gemma:GemmaModel"))
    register(cera.ModelFamily(name="gemma2", architectures=("gemma2",), factory="cera_model_gemma.gemma2:Gemma2Model"))
    register(cera.ModelFamily(name="gemma3", architectures=("gemma3",), factory="cera_model_gemma.gemma3:Gemma3Model"))
    register(cera.ModelFamily(name="gemma4", architectures=("gemma4",), factory="cera_model_gemma.gemma4:Gemma4Model"))
