"""cera model family: gemma2 and gemma3."""
