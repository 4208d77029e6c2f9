"""cera model family: qwen2."""
