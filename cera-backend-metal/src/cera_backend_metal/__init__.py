"""cera backend for Apple GPUs through MLX (`cera_backend_metal.backend`); on other machines
it runs on MLX's CPU device when ``CERA_METAL_DEVICE=cpu`` asks for it."""
