"""cera backend for GPUs through wgpu (Vulkan, Metal, DX12): registered with cera, not implemented yet.

See `cera_backend_vulkan.plugin` for what it registers and why it reports itself unusable.
"""
