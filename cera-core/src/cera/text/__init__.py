"""Text: the tokenizers of GGUF vocabularies (`tokenizer`), chat templates
(`chat_template`), the sandbox they render in (`template_sandbox`), and what a template
renders by itself (`template_profile`)."""
