"""Where the HTP graphs run, and for which SoC they are built.

- ``CERA_HEXAGON_SOC`` names the Snapdragon the context binaries are built for (default
  the Snapdragon 8 Gen 3, SM8650): a product name from `SOCS` or a bare QNN ``soc_model``
  number. Its HTP architecture comes from the same table.
- ``CERA_HEXAGON_TARGET``: ``device`` (the default) runs on the NPU of the machine, which
  must be an ARM64 Snapdragon with the QNN HTP runtime (``libcdsprpc.so``, the FastRPC
  library that reaches the DSP); ``simulator`` runs the same context binaries on QNN's x86-64
  HTP simulator, which ships inside the ``onnxruntime-qnn`` wheel for Linux x86-64.

Where it runs is checked by the plugin module itself (`cera_backend_hexagon.plugin`), which
must stay cheap; this module adds the SoC table.

The SoC numbers are QNN's ``QNN_SOC_MODEL_*`` values (QnnTypes.h of the QNN SDK, as
ExecuTorch's Qualcomm backend lists them in ``qc_schema.py``).
"""

from __future__ import annotations

import os

import attrs

from cera.errors import BackendUnavailable, InvalidOptions

from .plugin import qnn_package_dir, target, unavailable_reason  # noqa: F401 - the checks the plugin runs


@attrs.frozen
class Soc:
    name: str  # the part number, e.g. SM8650
    product: str
    soc_model: int  # QNN's soc_model
    htp_arch: int  # the Hexagon tensor processor generation (v73 -> 73)

    @property
    def label(self) -> str:
        return f"{self.name}-v{self.htp_arch}"


SOCS = {
    s.name: s
    for s in (
        Soc("SM8450", "Snapdragon 8 Gen 1", 36, 69),
        Soc("SM8475", "Snapdragon 8+ Gen 1", 42, 69),
        Soc("SM8550", "Snapdragon 8 Gen 2", 43, 73),
        Soc("SM8635", "Snapdragon 8s Gen 3", 68, 73),
        Soc("SM8650", "Snapdragon 8 Gen 3", 57, 75),
        Soc("SM8735", "Snapdragon 8s Gen 4", 85, 79),
        Soc("SM8750", "Snapdragon 8 Elite", 69, 79),
        Soc("SM8850", "Snapdragon 8 Elite Gen 5", 87, 81),
        Soc("SA8295", "Snapdragon SA8295P (automotive)", 39, 68),
    )
}
DEFAULT_SOC = "SM8650"
ALIASES = {"8gen1": "SM8450", "8gen2": "SM8550", "8gen3": "SM8650", "8elite": "SM8750", "8elitegen5": "SM8850"}


def resolve_soc(value: str | None = None) -> Soc:
    """The SoC a name (SM8650, 8gen3) or a soc_model number names; default $CERA_HEXAGON_SOC,
    else the Snapdragon 8 Gen 3."""
    raw = (value if value is not None else os.environ.get("CERA_HEXAGON_SOC", "")).strip() or DEFAULT_SOC
    key = raw.upper()
    alias = ALIASES.get(raw.lower().replace(" ", "").replace("snapdragon", "").replace("-", ""))
    if alias:
        return SOCS[alias]
    if key in SOCS:
        return SOCS[key]
    if raw.isdigit():
        for s in SOCS.values():
            if s.soc_model == int(raw):
                return s
    known = ", ".join(f"{s.name} ({s.product})" for s in SOCS.values())
    raise InvalidOptions(f"unknown Hexagon SoC {raw!r} (CERA_HEXAGON_SOC / --soc); known: {known}")


def require() -> str:
    """The target, or BackendUnavailable with the one-line reason."""
    reason = unavailable_reason()
    if reason:
        raise BackendUnavailable(f"backend 'hexagon' is unavailable: {reason}")
    return target()
