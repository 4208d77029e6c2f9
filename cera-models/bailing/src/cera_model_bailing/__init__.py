"""cera model family: Bailing MoE (inclusionAI's Ling)."""
