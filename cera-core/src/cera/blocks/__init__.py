"""The shared blocks model families are made of: GGUF hyperparameters read strictly
(`hparams`), the layers written with the ops (`layers`), and the llama-shaped decoder with
its variations (`decoder`)."""
