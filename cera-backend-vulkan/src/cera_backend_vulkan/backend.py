"""The factory named by the `vulkan` BackendSpec: it refuses, naming the reason (`cera.placeholder`)."""

from cera.placeholder import PlaceholderBackend


class VulkanBackend(PlaceholderBackend):
    name = "vulkan"
    distribution = "cera-backend-vulkan"
