"""cera backend for Apple GPUs through MLX: registered with cera, not implemented yet.

See `cera_backend_metal.plugin` for what it registers and why it reports itself unusable.
"""
