"""cera model family: qwen3."""
