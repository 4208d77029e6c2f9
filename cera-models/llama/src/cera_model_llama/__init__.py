"""cera model family: llama and llama-shaped architectures."""
