"""cera backend for GPUs through wgpu (Vulkan, Metal, DX12).

See `cera_backend_vulkan.backend` for the design and `cera_backend_vulkan.plugin` for
what it registers.
"""
