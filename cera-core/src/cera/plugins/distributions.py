"""The distributions this repository publishes, by what they provide: the source of every
"install X" hint.

A hint must name a distribution that exists. Building the name from what the user typed
(``--device cuda`` -> ``cera-backend-cuda``) sends people to whatever anyone uploads under
that name, so names come only from the tables below. A hint must also not tell people to
install what they already have: when the distribution is installed but its plugin did not
load (``--no-plugins``, ``CERA_PLUGINS``, a broken plugin), the hint says that instead.

Cheap to import: the standard library only.
"""

from __future__ import annotations

from importlib import metadata

# backend name (as `--device` takes it) -> distribution
BACKENDS = {
    "cpu": "cera-backend-cpu",
    "vulkan": "cera-backend-vulkan",
    "metal": "cera-backend-metal",
    "hexagon": "cera-backend-hexagon",
}

# GGUF general.architecture -> model family distribution
FAMILIES = {
    "llama": "cera-model-llama",
    "granite": "cera-model-llama",
    "smollm3": "cera-model-llama",
    "minicpm": "cera-model-llama",
    "exaone": "cera-model-llama",
    "starcoder2": "cera-model-llama",
    "qwen2": "cera-model-qwen2",
    "qwen3": "cera-model-qwen3",
    "qwen3moe": "cera-model-qwen3",
    "gemma": "cera-model-gemma",
    "gemma2": "cera-model-gemma",
    "gemma3": "cera-model-gemma",
    "phi3": "cera-model-phi3",
    "phi2": "cera-model-phi3",
    "olmo2": "cera-model-olmo2",
    "nanbeige": "cera-model-llama",
    "mistral3": "cera-model-llama",
    "gemma4": "cera-model-gemma",
    "lfm2": "cera-model-lfm2",
    "lfm2moe": "cera-model-lfm2",
    "mamba2": "cera-model-mamba",
    "granitehybrid": "cera-model-mamba",
    "falcon-h1": "cera-model-mamba",
    "bert": "cera-model-bert",
    "nomic-bert": "cera-model-bert",
}

# GGUF general.architecture of a non-LLM model -> (distribution, what it is, the command that runs it)
AUDIO = {
    "silero-vad": ("cera-audio-vad", "a voice activity detector (Silero VAD)", "cera vad --model FILE --audio AUDIO"),
    "microwakeword": ("cera-audio-kws", "a wake-word detector (microWakeWord)", "cera kws --model FILE --audio AUDIO"),
    "ge2e": ("cera-audio-diarizer", "a speaker encoder for diarization (GE2E)", "cera diarize --model FILE --audio AUDIO"),
}


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or None."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _not_loaded(distribution: str, plugins_disabled: bool) -> str:
    if plugins_disabled:
        return (
            f"{distribution} is installed, but plugins are disabled (`--no-plugins` or CERA_PLUGINS); "
            "run without them"
        )
    return f"{distribution} is installed, but its plugin did not load: `cera plugins` says why"


def backend_hint(name: str, plugins_disabled: bool = False) -> str:
    """What to do about a backend name that no loaded plugin registered."""
    base = name.split(":", 1)[0]
    if base != name and base in BACKENDS:
        return f"`--device` takes a backend name ({base}), not a device index"
    dist = BACKENDS.get(name)
    if dist is None:
        return f"cera's backends are {', '.join(BACKENDS)} (`cera plugins` lists the installed ones)"
    if installed_version(dist) is not None:
        return _not_loaded(dist, plugins_disabled)
    return f"it comes with the {dist} distribution"


def no_backend_hint(plugins_disabled: bool = False) -> str:
    """What to do when no backend is loaded at all."""
    have = [d for d in BACKENDS.values() if installed_version(d) is not None]
    if have:
        return _not_loaded(have[0], plugins_disabled)
    return f"install one, e.g. `pip install {BACKENDS['cpu']}`"


def architecture_hint(architecture: str, plugins_disabled: bool = False) -> str:
    """What to do about a GGUF architecture that no loaded family serves."""
    if architecture in AUDIO:
        dist, what, command = AUDIO[architecture]
        return f"this file is {what}, not a language model: run it with `{command}` ({dist})"
    dist = FAMILIES.get(architecture)
    if dist is None:
        return (
            "no distribution of cera serves it yet; a family plugin can add it "
            "(examples/cera-model-example in cera's repository shows how)"
        )
    if installed_version(dist) is not None:
        return _not_loaded(dist, plugins_disabled)
    return f"the {dist} distribution serves it (cera-models installs every family)"


def all_installed() -> list[tuple[str, str]]:
    """(distribution, version) of every installed distribution of this project, sorted:
    the core, the CLI and every plugin (of the `cera` entry-point group)."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        mine = name.startswith("cera-") or name in ("cera", "llm-cera")
        if not mine:
            mine = any(ep.group == "cera" for ep in dist.entry_points)
        if mine:
            found.setdefault(name, dist.version)
    return sorted(found.items())
