"""cera model families: mamba2, granitehybrid."""
