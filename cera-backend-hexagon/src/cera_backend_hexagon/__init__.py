"""cera backend for Qualcomm Hexagon NPUs (HTP) through QNN: registered with cera, not implemented yet.

See `cera_backend_hexagon.plugin` for what it registers and why it reports itself unusable.
"""
