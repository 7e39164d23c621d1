"""shim_probe.py: the Python solution tests/test_python_shim.cpp loads into the shims on the CPU.

It reads every tensor it is handed the way a DLPack consumer does, with a small ctypes reader of
the "dltensor" capsule (DLManagedTensor: data, device, ndim, dtype, shape, strides, byte_offset),
consumes the capsule (renamed "used_dltensor", deleter called) and, for host tensors of the dtypes
numpy knows, through numpy.from_dlpack as well, checking that numpy's array starts at the same
address (zero-copy). It writes what it saw as JSON to $NIBBLE_TEST_OUT after every call, and
writes through the tensors (scratch.u8 in build_model, logits in decode_step, C in run) so the test
sees the harness's own buffers change. $NIBBLE_TEST_BUG picks one bug of the kinds a grade must
turn into a disposition: import_error, hang_import, missing_entry, build_raises, not_supported,
step_raises, wrong_dtype, hang_step, bad_layout.
"""
import ctypes
import json
import os

import nibble_abi
import numpy as np

BUG = os.environ.get("NIBBLE_TEST_BUG", "")
OUT = os.environ.get("NIBBLE_TEST_OUT", "")
NAME = "shim-probe"
OUTPUT_DTYPE = "bfloat16"  # the GEMM shim must read it back (nibble_gemm_output_dtype)
INT4_LAYOUT = "gguf" if BUG == "bad_layout" else "awq"  # and this (nibble_gemm_int4_layout)

if BUG == "import_error":
    import nibble_no_such_module  # noqa: F401  (the import error under test)
if BUG == "hang_import":
    while True:
        pass


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_set_name = ctypes.pythonapi.PyCapsule_SetName
_set_name.restype = ctypes.c_int
_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
_USED = ctypes.c_char_p(b"used_dltensor")  # the capsule keeps this pointer: it lives as long as the module
_NUMPY = {(1, 8): np.uint8, (2, 32): np.float32, (0, 64): np.int64}
RECORD = {}


def read_capsule(capsule):
    """The DLTensor of a "dltensor" capsule as a dict; the capsule consumed as a consumer would."""
    ptr = _get_pointer(capsule, b"dltensor")
    m = DLManagedTensor.from_address(ptr)
    t = m.dl_tensor
    d = {"data": t.data or 0, "device": [t.device.device_type, t.device.device_id], "ndim": t.ndim,
         "dtype": [t.dtype.code, t.dtype.bits, t.dtype.lanes], "shape": [t.shape[i] for i in range(t.ndim)],
         "strides": [t.strides[i] for i in range(t.ndim)], "byte_offset": t.byte_offset}
    _set_name(capsule, _USED)
    m.deleter(ctypes.cast(ptr, ctypes.POINTER(DLManagedTensor)))
    return d


def describe(t):
    d = read_capsule(t.__dlpack__())
    d["name"], d["dtype_name"], d["abi_shape"], d["abi_strides"] = t.name, t.dtype, list(t.shape), list(t.strides)
    if t.device[0] == nibble_abi.DEVICE_CPU:
        # The bytes the tensor spans, from its first element to its last (strides may be any order).
        itemsize = t.dtype_bits // 8
        span = (1 + sum((s - 1) * abs(st) for s, st in zip(t.shape, t.strides))) * itemsize if t.numel else 0
        d["bytes"] = ctypes.string_at(t.data_ptr + t.byte_offset, span).hex()
        np_dtype = _NUMPY.get((t.dtype_code, t.dtype_bits))
        if np_dtype is not None:
            a = np.from_dlpack(t)
            d["numpy"] = {"address": a.__array_interface__["data"][0], "dtype": str(a.dtype), "shape": list(a.shape),
                          "strides": list(a.strides), "sum": float(a.astype(np.float64).sum())}
    # Refusals a consumer may meet.
    for kwargs in ({"copy": True}, {"dl_device": (t.device[0], t.device[1] + 1)}):
        try:
            t.__dlpack__(**kwargs)
            d.setdefault("not_refused", []).append(list(kwargs))
        except BufferError:
            pass
    # A capsule nobody consumes frees its own descriptor when collected.
    unused = t.__dlpack__()
    del unused
    return d


def save():
    if OUT:
        with open(OUT, "w") as f:
            json.dump(RECORD, f)


def _deep(n):
    if n == 0:
        raise ValueError("bad weights in layer 0 (a deliberate bug)")
    _deeper(n - 1)  # two functions in turn: Python folds a run of identical frames, not these


def _deeper(n):
    _deep(n)


def build_model(model, stream):
    if BUG == "build_raises":
        _deep(40)  # a traceback longer than nibble_error holds: its tail must survive
    if BUG == "not_supported":
        raise nibble_abi.NotSupported("this probe declines every config")
    RECORD["build"] = {"task": model.task, "config": model.config_name, "cfg": vars(model.cfg), "stream": stream,
                       "tensors": [describe(t) for t in model.tensors.values()]}
    if "scratch.u8" in model.tensors:
        a = np.from_dlpack(model.tensors["scratch.u8"])
        a[:] = np.arange(a.size, dtype=np.uint8) + 100  # written through to the harness's buffer
    save()
    return {"vocab": model.cfg.vocab, "steps": 0}


if BUG != "missing_entry":
    def decode_step(handle, token_ids, pos, logits, stream):
        handle["steps"] += 1
        RECORD.setdefault("steps", []).append({"pos": pos, "stream": stream, "token_ids": describe(token_ids),
                                               "logits": describe(logits)})
        save()
        if BUG == "step_raises":
            raise RuntimeError(f"step {pos} failed (a deliberate bug)")
        if BUG == "hang_step":
            while True:
                pass
        if BUG == "wrong_dtype":
            return np.zeros((1, handle["vocab"]), dtype=np.float64)
        if token_ids.device[0] != nibble_abi.DEVICE_CPU:
            return None  # a device tensor: its descriptor is all this probe reads
        ids = np.from_dlpack(token_ids)
        out = np.from_dlpack(logits)
        out[...] = ids[:, None] * 1000.0 + pos + np.arange(out.shape[1], dtype=np.float32)[None, :]
        return None


def teardown(handle, stream):
    RECORD["teardown"] = {"calls": handle.get("steps", handle.get("calls")), "stream": stream}
    save()


def prepare(problem, stream):
    if BUG == "not_supported":
        raise nibble_abi.NotSupported("this probe declines every shape")
    RECORD["prepare"] = {k: getattr(problem, k) for k in ("task", "config_name", "M", "N", "K", "block",
                                                          "scale_format", "global_scale", "c_dtype")}
    RECORD["prepare"]["tensors"] = [describe(t) for t in problem.tensors.values()]
    save()
    return {"calls": 0}


def run(handle, A, C, stream):
    handle["calls"] += 1
    RECORD.setdefault("runs", []).append({"A": describe(A), "C": describe(C), "stream": stream})
    save()
    # C (M, N) bf16 bits: 1.0 everywhere (0x3f80), written through a uint8 view of its bytes.
    c = (ctypes.c_uint16 * (C.numel)).from_address(C.data_ptr + C.byte_offset)
    for i in range(C.numel):
        c[i] = 0x3F80
