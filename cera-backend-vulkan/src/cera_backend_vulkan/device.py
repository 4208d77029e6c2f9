"""The GPU as wgpu sees it: adapter, device, features, limits, and compiled pipelines.

One `GpuContext` per (adapter index, process): creating a device costs about a second on
lavapipe, and pipelines (a WGSL module compiled by the driver) are cached by kernel
variant for the context's lifetime, so every executable and every loaded model on the
same adapter shares them.
"""

from __future__ import annotations

import os
import threading

from cera.errors import BackendUnavailable

from .tuning import switch

_lock = threading.Lock()
_adapters: list | None = None
_contexts: dict[int, GpuContext] = {}

# Features used when the adapter offers them (none is required: the kernels run on the
# WebGPU core); timestamp queries give `cera bench --profile` its per-kernel times, and
# timestamps inside a pass let that profile time the dispatches where they run, in the
# token's one pass (without them each dispatch gets a pass of its own).
WANTED_FEATURES = ("timestamp-query", "timestamp-query-inside-passes", "shader-f16", "subgroup")

# The checks wgpu compiles into every shader by default: "bounds" clamps array and buffer
# indices (naga's bounds-check policies: a min() per dynamic index), "loops" gives each
# loop a hidden iteration counter so that a shader cannot hang the GPU. cera's kernels are
# generated, not user code, and the conformance suite checks them op by op against the
# reference, so by default they are compiled without either, through wgpu-native's
# wgpuDeviceCreateShaderModuleTrusted (the H200's prompts ran 4-11% faster);
# CERA_VULKAN_SHADER_CHECKS=all restores wgpu's default, "bounds" or "loops" one of them.
SHADER_CHECKS = {"bounds": 0x1, "loops": 0x2}
SHADER_CHECKS_ENV = "CERA_VULKAN_SHADER_CHECKS"


def shader_checks() -> tuple[str, ...]:
    """The runtime checks CERA_VULKAN_SHADER_CHECKS asks for (the tuning's
    ``shader_checks``; none by default)."""
    return switch("shader_checks")


def _wgpu():
    try:
        import wgpu
    except ImportError as e:  # pragma: no cover - the distribution depends on it
        raise BackendUnavailable(
            f"backend 'vulkan' needs the wgpu package ({e}); pip install 'wgpu>=0.32,<0.33'"
        ) from None
    return wgpu


def adapters() -> list:
    """The adapters wgpu enumerates (Vulkan, Metal or DX12 devices), cached."""
    global _adapters
    with _lock:
        if _adapters is None:
            wgpu = _wgpu()
            os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")  # silences a loader warning on headless machines
            try:
                found = list(wgpu.gpu.enumerate_adapters_sync())
            except Exception as e:  # noqa: BLE001 - any loader failure means "no adapter"
                raise BackendUnavailable(f"backend 'vulkan': wgpu could not enumerate GPU adapters ({e})") from None
            # discrete GPUs first, then integrated, then software (lavapipe) ones
            rank = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}
            found = [a for a in found if a.info.get("backend_type") != "OpenGL"]
            found.sort(key=lambda a: rank.get(a.info.get("adapter_type"), 4))
            _adapters = found
        return _adapters


def describe(adapter) -> str:
    info = adapter.info
    return f"{info.get('device') or info.get('description')} ({info.get('backend_type')}, {info.get('adapter_type')})"


def is_software(adapter) -> bool:
    return adapter.info.get("adapter_type") == "CPU"


class GpuContext:
    """A device on one adapter and its pipeline cache."""

    def __init__(self, index: int):
        wgpu = _wgpu()
        found = adapters()
        if not found:
            raise BackendUnavailable(
                "backend 'vulkan': no GPU adapter found (no Vulkan driver? on Debian `apt-get install "
                "mesa-vulkan-drivers` gives a software one, lavapipe)"
            )
        if not 0 <= index < len(found):
            raise BackendUnavailable(
                f"backend 'vulkan' has {len(found)} adapter(s); device_index {index} does not exist"
            )
        self.wgpu = wgpu
        self.adapter = found[index]
        self.name = describe(self.adapter)
        self.software = is_software(self.adapter)
        feats = set(self.adapter.features)
        self.features = tuple(f for f in WANTED_FEATURES if f in feats)
        lim = self.adapter.limits
        want = {
            "max-storage-buffer-binding-size": lim["max-storage-buffer-binding-size"],
            "max-buffer-size": lim["max-buffer-size"],
            "max-compute-workgroup-storage-size": lim["max-compute-workgroup-storage-size"],
            "max-storage-buffers-per-shader-stage": lim["max-storage-buffers-per-shader-stage"],
            "max-compute-invocations-per-workgroup": lim["max-compute-invocations-per-workgroup"],
        }
        try:
            self.device = self.adapter.request_device_sync(required_features=list(self.features), required_limits=want)
        except Exception as e:  # noqa: BLE001
            raise BackendUnavailable(f"backend 'vulkan': cannot open {self.name}: {e}") from None
        self.limits = self.device.limits
        self.max_binding = int(self.limits["max-storage-buffer-binding-size"]) // 256 * 256
        self.max_buffer = int(self.limits["max-buffer-size"])
        self.uniform_align = max(256, int(self.limits["min-uniform-buffer-offset-alignment"]))
        self.storage_align = int(self.limits["min-storage-buffer-offset-alignment"])
        self.queue = self.device.queue
        self.shader_checks = switch("shader_checks")
        # a subgroup computes one output feature of a matvec; a workgroup holds
        # MV_WG / subgroup-size of them, so the grid is sized for the smallest size the
        # adapter may choose (wgpu reports the range)
        self.subgroups = "subgroup" in self.features and switch("subgroups")
        self.subgroup_size = self._measure_subgroup() if self.subgroups else 1
        self._pipelines: dict = {}
        self._plock = threading.Lock()
        self.lock = threading.RLock()  # one submission at a time on this device
        self.n_dispatch = 0

    def _measure_subgroup(self) -> int:
        """The subgroup size of a 128-thread compute pipeline here (8 on lavapipe's 256-bit
        vectors, 32 on NVIDIA)."""
        wgpu = self.wgpu
        code = """
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(128)
fn main(@builtin(local_invocation_index) t: u32, @builtin(subgroup_size) s: u32) { if (t == 0u) { out[0] = s; } }
"""
        buf = self.device.create_buffer(size=16, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
        pipe = self.device.create_compute_pipeline(
            layout="auto", compute={"module": self.shader_module(code), "entry_point": "main"}
        )
        bg = self.device.create_bind_group(
            layout=pipe.get_bind_group_layout(0), entries=[{"binding": 0, "resource": {"buffer": buf}}]
        )
        enc = self.device.create_command_encoder()
        cp = enc.begin_compute_pass()
        cp.set_pipeline(pipe)
        cp.set_bind_group(0, bg)
        cp.dispatch_workgroups(1)
        cp.end()
        self.queue.submit([enc.finish()])
        size = int.from_bytes(bytes(self.queue.read_buffer(buf, 0, 4)), "little")
        return size if size in (4, 8, 16, 32, 64, 128) else 32

    def shader_module(self, code: str):
        """A WGSL module compiled with the runtime checks in ``self.shader_checks`` only.

        wgpu's Python API has no call for a module without checks, so this one goes to
        wgpu-native's C function through wgpu's own cffi bindings (wgpu 0.32 pinned by
        the distribution: the names below are that version's)."""
        if set(self.shader_checks) == set(SHADER_CHECKS):
            return self.device.create_shader_module(code=code)
        from wgpu.backends.wgpu_native import _api

        flags = 0
        for name in self.shader_checks:
            flags |= SHADER_CHECKS[name]
        source = _api.new_struct_p("WGPUShaderSourceWGSL *", code=_api.to_c_string_view(code))
        source[0].chain.next = _api.ffi.NULL
        source[0].chain.sType = _api.lib.WGPUSType_ShaderSourceWGSL
        descriptor = _api.new_struct_p(
            "WGPUShaderModuleDescriptor *",
            nextInChain=_api.ffi.cast("WGPUChainedStruct *", source),
            label=_api.to_c_string_view(""),
        )
        handle = _api.libf.wgpuDeviceCreateShaderModuleTrusted(self.device._internal, descriptor, flags)
        if handle == _api.ffi.NULL:
            raise RuntimeError("wgpu-native returned no shader module")
        return _api.GPUShaderModule("", handle, self.device)

    @property
    def timestamps(self) -> bool:
        return "timestamp-query" in self.features

    @property
    def timestamps_in_pass(self) -> bool:
        return self.timestamps and "timestamp-query-inside-passes" in self.features

    def pipeline(self, key, source, n_bindings: int, read_only: tuple[int, ...] = ()):
        """The compute pipeline of kernel variant ``key`` (``source()`` gives its WGSL)
        with a uniform at binding 0 and storage buffers at 1..n_bindings-1."""
        with self._plock:
            p = self._pipelines.get(key)
            if p is not None:
                return p
        wgpu = self.wgpu
        entries = [{"binding": 0, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": "uniform"}}]
        for b in range(1, n_bindings):
            kind = "read-only-storage" if b in read_only else "storage"
            entries.append({"binding": b, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": kind}})
        layout = self.device.create_bind_group_layout(entries=entries)
        code = source()
        try:
            module = self.shader_module(code)
            pipe = self.device.create_compute_pipeline(
                layout=self.device.create_pipeline_layout(bind_group_layouts=[layout]),
                compute={"module": module, "entry_point": "main"},
            )
        except Exception as e:
            raise RuntimeError(f"the WGSL kernel {key!r} does not compile here: {e}") from e
        with self._plock:
            self._pipelines[key] = p = (pipe, layout)
        return p

    def buffer(self, size: int, usage=None, label: str = ""):
        wgpu = self.wgpu
        if usage is None:
            usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC
        size = max(16, -(-int(size) // 16) * 16)
        if size > self.max_buffer:
            raise BufferTooLarge(size, self.max_buffer)
        return self.device.create_buffer(size=size, usage=usage, label=label)


class BufferTooLarge(Exception):
    def __init__(self, size, limit):
        super().__init__(f"a buffer of {size} bytes exceeds the adapter's limit of {limit}")
        self.size, self.limit = size, limit


def context(index: int = 0) -> GpuContext:
    with _lock:
        ctx = _contexts.get(index)
    if ctx is None:
        ctx = GpuContext(index)
        with _lock:
            ctx = _contexts.setdefault(index, ctx)
    return ctx
