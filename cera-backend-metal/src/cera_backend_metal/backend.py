"""The factory named by the `metal` BackendSpec: it refuses, naming the reason (`cera.plugins.placeholder`)."""

from cera.plugins.placeholder import PlaceholderBackend


class MetalBackend(PlaceholderBackend):
    name = "metal"
    distribution = "cera-backend-metal"
