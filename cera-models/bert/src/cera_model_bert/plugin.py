"""Registers the bert families. Cheap: imports nothing but cera's declarations."""

import cera

CERA_PLUGIN_API = ">=2,<3"


@cera.hookimpl
def cera_register_models(register):
    register(cera.ModelFamily(name="bert", architectures=("bert",), factory="cera_model_bert.bert:BertModel"))
    register(
        cera.ModelFamily(
            name="nomic-bert", architectures=("nomic-bert",), factory="cera_model_bert.bert:NomicBertModel"
        )
    )
