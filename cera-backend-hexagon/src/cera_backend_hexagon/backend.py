"""The factory named by the `hexagon` BackendSpec: it refuses, naming the reason (`cera.plugins.placeholder`)."""

from cera.plugins.placeholder import PlaceholderBackend


class HexagonBackend(PlaceholderBackend):
    name = "hexagon"
    distribution = "cera-backend-hexagon"
