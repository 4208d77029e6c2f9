"""cera model families: lfm2, lfm2moe."""
