#!/usr/bin/env python3
"""make_corpus.py: (re)write the seed corpus of fuzz_safetensors (tests/fuzz/corpus/).

Small valid and invalid safetensors files, manifests, and manifest + file pairs joined by the
separator line that fuzz_safetensors.cpp splits on. Deterministic: rerunning gives the same bytes.
Reproducers of crashes found by the fuzzer are saved next to these as crash-*.bin and never
regenerated here.
"""
import hashlib
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")
SEP = b"\n--8<--\n"


def st(header: dict, data: bytes, pad=True, length=None) -> bytes:
    h = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    n = len(h) if length is None else length
    return struct.pack("<Q", n) + h + data


def tensors(specs, metadata=None):
    """specs: [(name, dtype, shape, bytes)] -> (header, data), offsets contiguous in order."""
    header, data, off = {}, b"", 0
    for name, dtype, shape, b in specs:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(b)]}
        data += b
        off += len(b)
    if metadata is not None:
        header["__metadata__"] = metadata
    return header, data


def manifest(model: bytes, header: dict, data: bytes, **over) -> bytes:
    m = {
        "task": "megakernel-int4-weight-decode",
        "config": "tiny",
        "seed": 0,
        "generator_version": 1,
        "file": "model.safetensors",
        "file_bytes": len(model),
        "file_sha256": hashlib.sha256(model).hexdigest(),
        "tensor_sha256": {
            k: hashlib.sha256(data[v["data_offsets"][0]:v["data_offsets"][1]]).hexdigest()
            for k, v in header.items() if k != "__metadata__"
        },
        "build_seconds": 0.5,
        "threads": 2,
    }
    m.update(over)
    return json.dumps(m, indent=1).encode()


def main():
    os.makedirs(OUT, exist_ok=True)
    bf16 = struct.pack("<4H", 0x3F80, 0xBF80, 0x0000, 0x7FC0)
    f32 = struct.pack("<3f", 1.0, -2.5, 1e-30)
    i64 = struct.pack("<2q", 7, -1)
    u8 = bytes(range(6))
    small_h, small_d = tensors(
        [("embed.packed", "U8", [2, 3], u8), ("final_norm", "BF16", [4], bf16),
         ("logits", "F32", [1, 3], f32), ("tokens", "I64", [2], i64)],
        {"task": "megakernel-int4-weight-decode", "seed": "0"})
    small = st(small_h, small_d)
    files = {
        "valid-empty.safetensors": st({}, b""),
        "valid-metadata-only.safetensors": st({"__metadata__": {"a": "b"}}, b""),
        "valid-small.safetensors": small,
        "valid-unpadded.safetensors": st(small_h, small_d, pad=False),
        "valid-zero-size.safetensors": st(*tensors([("empty", "F32", [0, 5], b""), ("one", "U8", [], b"\x01")])),
        "valid-null-metadata.safetensors": st({"__metadata__": None, "x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}, b"\x05"),
        "bad-short.safetensors": b"\x08\x00\x00",
        "bad-header-past-end.safetensors": st(small_h, small_d, length=1 << 20),
        "bad-header-huge.safetensors": struct.pack("<Q", 1 << 62) + b"{}",
        "bad-not-json.safetensors": struct.pack("<Q", 8) + b"{\"a\":[1,",
        "bad-not-object.safetensors": st([1, 2, 3], b""),
        "bad-dtype.safetensors": st(*tensors([("x", "F16", [2], b"\0\0\0\0")])),
        "bad-shape-negative.safetensors": st({"x": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}}, b"\0"),
        "bad-shape-float.safetensors": st({"x": {"dtype": "U8", "shape": [1.5], "data_offsets": [0, 1]}}, b"\0"),
        "bad-shape-overflow.safetensors": st({"x": {"dtype": "I64", "shape": [1 << 40, 1 << 40], "data_offsets": [0, 8]}}, b"\0" * 8),
        "bad-offsets-reversed.safetensors": st({"x": {"dtype": "U8", "shape": [0], "data_offsets": [4, 2]}}, b"\0" * 4),
        "bad-offsets-past-end.safetensors": st({"x": {"dtype": "U8", "shape": [16], "data_offsets": [0, 16]}}, b"\0" * 4),
        "bad-offsets-overlap.safetensors": st({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                               "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}, b"\0" * 6),
        "bad-offsets-gap.safetensors": st({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                                           "b": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]}}, b"\0" * 6),
        "bad-trailing-bytes.safetensors": small + b"\0\0\0\0",
        "bad-size-mismatch.safetensors": st({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4),
        "bad-metadata-not-string.safetensors": st({"__metadata__": {"a": 1}}, b""),
        "bad-entry-not-object.safetensors": st({"x": 3}, b""),
        "manifest-alone.json": manifest(small, small_h, small_d),
        "manifest-missing-field.json": json.dumps({"task": "t", "config": "tiny"}).encode(),
        "manifest-bad-file-name.json": manifest(small, small_h, small_d, file="../etc/passwd"),
        "manifest-bad-sha.json": manifest(small, small_h, small_d, file_sha256="ABC"),
        "pair-valid.bin": manifest(small, small_h, small_d) + SEP + small,
    }
    flipped = bytearray(small)
    flipped[-5] ^= 0x40
    files["pair-one-byte-flipped.bin"] = manifest(small, small_h, small_d) + SEP + bytes(flipped)
    files["pair-truncated.bin"] = manifest(small, small_h, small_d) + SEP + small[:-3]
    files["pair-header-changed.bin"] = manifest(small, small_h, small_d) + SEP + small.replace(b'"seed":"0"', b'"seed":"1"')
    for name, b in files.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(b)
    print(f"{len(files)} seed inputs in {OUT}")


if __name__ == "__main__":
    main()
