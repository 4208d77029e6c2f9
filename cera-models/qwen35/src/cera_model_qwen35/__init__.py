"""cera model families qwen35, qwen35moe and qwen3next: gated delta-net hybrids."""
