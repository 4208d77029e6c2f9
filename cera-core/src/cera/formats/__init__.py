"""File formats: the GGUF reader (`gguf`) and cera's checkpoint files (`checkpoint`)."""
