"""cera model family: olmo2."""
