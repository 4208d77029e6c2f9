"""cera model families: bert, nomic-bert."""
