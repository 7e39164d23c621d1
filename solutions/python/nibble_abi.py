"""nibble_abi: what a Python solution sees of the nibble C ABI (embedded in libnibble_python_*.so).

The shim (solutions/python/python_shim.cpp) runs this source as the module `nibble_abi` before it
imports a solution, so a solution may `import nibble_abi` for the exception that declines a config
and for the types it is handed. Nothing here copies a tensor: every Tensor describes a buffer of the
harness (device pointer, shape, strides, dtype) and `__dlpack__` hands out a fresh DLPack capsule
("dltensor") over that same memory each time it is asked, so

    w = torch.from_dlpack(model.tensors["layers.0.q.packed"])   # zero-copy, on the harness's GPU

works for PyTorch, CuPy (cupy.from_dlpack), numpy (CPU tensors only) and anything that speaks
DLPack: a consumer that passes max_version >= (1, 0) gets a DLPack 1.0 "dltensor_versioned" capsule
(writable), any other the legacy "dltensor". The capsule's deleter frees only the capsule's own
shape/stride arrays, never the buffer.

A decode solution (task megakernel-int4-weight-decode) defines, at module level:

    build_model(model: DecodeModel, stream: int) -> handle       untimed; any Python object
    decode_step(handle, token_ids: Tensor, pos: int, logits: Tensor, stream: int) -> None   timed
    teardown(handle, stream: int) -> None

A GEMM solution (gemm-w4a16-nvfp4, gemm-bf16-mxfp4, gemm-w4a16-int4) defines:

    prepare(problem: GemmProblem, stream: int) -> handle          untimed
    run(handle, A: Tensor, C: Tensor, stream: int) -> None        timed
    teardown(handle, stream: int) -> None
    OUTPUT_DTYPE = "float32" | "bfloat16"                         optional, default "float32"
    INT4_LAYOUT = "plain" | "awq" | "gptq" | "gptq_g_idx" | "compressed_tensors"
                  optional, gemm-w4a16-int4: the layout of problem.tensors (default "plain";
                  include/nibble/nibble_gemm.h lists each layout's tensors)

`stream` is the cudaStream_t as an integer: `torch.cuda.ExternalStream(stream)`. Outputs are written
in place (logits, C); a step or run that returns anything but None is an error, since a returned
tensor is never read. Raise NotSupported to decline a config (disposition NotSupported); any other
exception ends the grade with the traceback's last lines as the reason.
"""

import sys
import traceback
import types

import _nibble_dlpack

# DLPack's DLDataTypeCode and the names a solution reads (nibble.h: NIBBLE_DTYPE_*).
_DTYPE_NAMES = {(0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64",
                (1, 8): "uint8", (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64",
                (2, 16): "float16", (2, 32): "float32", (2, 64): "float64", (4, 16): "bfloat16"}
# DLPack's DLDeviceType: the harness passes kDLCUDA; kDLCPU only in the CPU tests.
DEVICE_CPU = 1
DEVICE_CUDA = 2


class NotSupported(Exception):
    """Raise from build_model / prepare to decline this config or shape: disposition NotSupported."""


class Tensor:
    """One tensor of the harness: a view, never a copy. Attributes: name, data_ptr (the buffer's
    address as an int; the tensor starts byte_offset bytes past it), device ((type, id) as DLPack
    numbers), dtype ("uint8", "bfloat16", "float32", "int64", ...), dtype_code/bits/lanes
    (DLPack's), shape and strides (tuples; strides in elements), byte_offset."""

    __slots__ = ("name", "data_ptr", "device", "dtype", "dtype_code", "dtype_bits", "dtype_lanes",
                 "shape", "strides", "byte_offset")

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        # The data is ready on the harness's stream before the solution is called (the harness
        # synchronises), so there is nothing to order against the consumer's `stream`.
        if copy:
            raise BufferError("nibble tensors alias the harness's buffers: copy=True is not offered")
        if dl_device is not None and tuple(dl_device) != self.device:
            raise BufferError(f"tensor '{self.name}' lives on device {self.device}, not {tuple(dl_device)}")
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        return _nibble_dlpack.capsule(self.data_ptr, self.device[0], self.device[1], self.dtype_code,
                                      self.dtype_bits, self.dtype_lanes, self.shape, self.strides,
                                      self.byte_offset, versioned)

    def __dlpack_device__(self):
        return self.device

    @property
    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __repr__(self):
        return f"nibble_abi.Tensor({self.name!r}, {self.dtype}, shape={self.shape}, device={self.device})"


def _tensor(name, data_ptr, device_type, device_id, code, bits, lanes, shape, strides, byte_offset):
    t = Tensor()
    t.name = name
    t.data_ptr = data_ptr
    t.device = (device_type, device_id)
    t.dtype_code, t.dtype_bits, t.dtype_lanes = code, bits, lanes
    t.dtype = _DTYPE_NAMES.get((code, bits), f"code{code}x{bits}") if lanes == 1 else f"code{code}x{bits}x{lanes}"
    t.shape = tuple(shape)
    t.strides = tuple(strides)
    t.byte_offset = byte_offset
    return t


SimpleNamespace = types.SimpleNamespace  # DecodeModel.cfg


class DecodeModel(types.SimpleNamespace):
    """build_model's argument: task, config_name, cfg (layers, d, ffn, n_q, n_kv, hd, vocab, group,
    batch, max_seq, eps, theta) and tensors (dict: fixture name -> Tensor)."""


class GemmProblem(types.SimpleNamespace):
    """prepare's argument: task, config_name, M, N, K, block (16, 32 or 128), scale_format ("e4m3fn",
    "e8m0" or, for int4, "float16"), global_scale (float), c_dtype ("float32" or "bfloat16") and
    tensors (dict name -> Tensor: W.packed, W.scale and, for NVFP4, W.global_scale; for int4 the
    INT4_LAYOUT's tensors)."""


# ---- Called by the shim, not by solutions. ------------------------------------------------------

ENTRY_POINTS = {"decode": ("build_model", "decode_step", "teardown"), "gemm": ("prepare", "run", "teardown")}
_STATUS_NOT_SUPPORTED, _STATUS_OUT_OF_MEMORY, _STATUS_INTERNAL = 2, 4, 5


def _load(path, family):
    """Import the solution at `path` as module `nibble_solution`; returns (module, missing entry
    points, the other family when the module defines all of that family's entry points or ""). Its
    folder goes first on sys.path, so it may import files beside it."""
    import importlib.util
    import os
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location("nibble_solution", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python module (give a .py file)")
    module = importlib.util.module_from_spec(spec)
    sys.modules["nibble_solution"] = module
    spec.loader.exec_module(module)
    missing = [n for n in ENTRY_POINTS[family] if not callable(getattr(module, n, None))]
    other = next((f for f, names in ENTRY_POINTS.items()
                  if f != family and all(callable(getattr(module, n, None)) for n in names)), "")
    return module, missing, other


def _output_dtype(module):
    """The GEMM C dtype the module asks for: 0 float32 (default), 1 bfloat16, -1 anything else."""
    d = getattr(module, "OUTPUT_DTYPE", "float32")
    d = getattr(d, "__name__", None) or str(d)  # accepts "bfloat16", torch.bfloat16, numpy types
    d = d.replace("torch.", "")
    return {"float32": 0, "float": 0, "bfloat16": 1}.get(d, -1)


_INT4_LAYOUTS = ("plain", "awq", "gptq", "gptq_g_idx", "compressed_tensors")  # NIBBLE_INT4_LAYOUT_* order


def _int4_layout(module):
    """The int4 layout the module asks for: its index in _INT4_LAYOUTS (default plain), -1 if unknown."""
    layout = getattr(module, "INT4_LAYOUT", "plain")
    return _INT4_LAYOUTS.index(layout) if layout in _INT4_LAYOUTS else -1


def _error(exc, limit):
    """(status, message) for an exception: NotSupported -> NOT_SUPPORTED, MemoryError or a CUDA
    out-of-memory error -> OUT_OF_MEMORY, anything else INTERNAL; the message is the traceback's
    last lines, cut from the front to fit `limit` bytes of UTF-8."""
    if isinstance(exc, NotSupported):
        status = _STATUS_NOT_SUPPORTED
    elif isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        status = _STATUS_OUT_OF_MEMORY
    else:
        status = _STATUS_INTERNAL
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
    # The frames of this module and the shim's call are no news to the author: start at theirs.
    lines = [l for l in text.split("\n") if "nibble_abi.py" not in l and "<nibble_abi>" not in l]
    text = "\n".join(lines)
    data = text.encode("utf-8", "replace")
    if len(data) > limit:
        # Cut from the front, but the last frame's place and the exception's type stay (a long
        # message would push both out: a newcomer's 100 KB ValueError read as a row of X's).
        frames = [l.strip() for l in lines if l.strip().startswith("File ")]
        head = "... [" + type(exc).__name__ + ((", " + frames[-1]) if frames else "") + "] ... "
        head_data = head.encode("utf-8", "replace")[: limit // 2]
        data = head_data + data[len(data) - (limit - len(head_data)):]
        text = data.decode("utf-8", "ignore")
    return status, text


def _check_returned(value, call, output):
    """A step/run returns None: a returned tensor is a result the harness never reads."""
    if value is None:
        return None
    what = type(value).__name__
    dtype, shape = getattr(value, "dtype", None), getattr(value, "shape", None)
    if dtype is not None or shape is not None:
        what += f" (dtype {dtype}, shape {tuple(shape) if shape is not None else None})"
    return (f"{call} returned a {what}: write the result into `{output.name}` ({output.dtype}, shape "
            f"{output.shape}) in place; the return value is not read")


def _facts():
    """The interpreter and the versions of the array and kernel libraries the solution imported."""
    import platform
    facts = {"python": platform.python_version(), "python_executable": sys.executable,
             "python_implementation": platform.python_implementation()}
    for name in ("torch", "triton", "numpy", "cupy"):
        m = sys.modules.get(name)
        facts[name] = getattr(m, "__version__", "unknown") if m is not None else "not imported"
    torch = sys.modules.get("torch")
    if torch is not None:
        facts["torch_cuda"] = str(getattr(getattr(torch, "version", None), "cuda", None))
    return facts
