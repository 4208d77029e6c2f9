"""Registers the llama family. Cheap: imports nothing but cera's declarations."""

import cera

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_models(register):
    register(cera.ModelFamily(name="llama", architectures=("llama",), factory="cera_model_llama.llama:LlamaModel"))
    register(
        cera.ModelFamily(name="smollm3", architectures=("smollm3",), factory="cera_model_llama.smollm3:SmolLM3Model")
    )
    register(
        cera.ModelFamily(name="granite", architectures=("granite",), factory="cera_model_llama.granite:GraniteModel")
    )
    register(
        cera.ModelFamily(name="minicpm", architectures=("minicpm",), factory="cera_model_llama.minicpm:MiniCPMModel")
    )
    register(cera.ModelFamily(name="exaone", architectures=("exaone",), factory="cera_model_llama.exaone:ExaoneModel"))
    register(
        cera.ModelFamily(
            name="starcoder2", architectures=("starcoder2",), factory="cera_model_llama.starcoder2:Starcoder2Model"
        )
    )
    register(
        cera.ModelFamily(name="nanbeige", architectures=("nanbeige",), factory="cera_model_llama.nanbeige:NanbeigeModel")
    )
    register(
        cera.ModelFamily(name="mistral3", architectures=("mistral3",), factory="cera_model_llama.mistral3:Mistral3Model")
    )
