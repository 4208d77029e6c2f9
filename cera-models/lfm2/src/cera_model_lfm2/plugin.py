"""Registers the lfm2 families. Cheap: imports nothing but cera's declarations."""

import cera

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_models(register):
    register(cera.ModelFamily(name="lfm2", architectures=("lfm2",), factory="cera_model_lfm2.lfm2:Lfm2Model"))
    register(cera.ModelFamily(name="lfm2moe", architectures=("lfm2moe",), factory="cera_model_lfm2.lfm2:Lfm2MoeModel"))
    # LFM2-VL's multimodal projector: an mmproj file (architecture clip, projector type lfm2)
    register(cera.ModelFamily(name="lfm2-vision", architectures=("clip.lfm2",),
                              factory="cera_model_lfm2.vision:Lfm2VisionEncoder"))  # fmt: skip
