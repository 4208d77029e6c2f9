"""cera model family: phi3."""
