#!/usr/bin/env python3
"""check_gemm_fixture.py: an independent check of the FP4 GEMM fixtures (issue 7), in numpy.

Builds the tiny fixture of gemm-w4a16-nvfp4 and gemm-bf16-mxfp4 with the C++ generator
(tests/gemm_fixture_tool) into a temporary folder, then
  1. checks the safetensors header (names, order, dtypes, shapes) against a tensor list derived here
     from the config, and the manifest's SHA-256 values with hashlib,
  2. re-implements the GEMM generator (fixtures/gemm_fp4/gemm_fixture.h) and the FP4 codecs and quantisers
     (fixtures/fp4.h) in numpy and compares every byte of every tensor.

The codecs here are deliberately written another way than the C++ ones: e2m1 and e4m3 encoding is
a brute-force nearest-value search over every code (ties to the even code, saturation at the
largest value), the e8m0 exponent comes from numpy.frexp, the element scaling from numpy.ldexp.
The counter RNG and bf16 rounding are imported from check_fixture.py (the decode task's check).

Exit status 0 only if everything matches; any mismatch prints what and where and exits 1.
usage: check_gemm_fixture.py --tool build/tests/gemm_fixture_tool [--seeds 0 1] [--keep DIR]
"""
import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_fixture import Checker, bf16_bits, normal, stream_key  # noqa: E402

import numpy as np  # noqa: E402  (check_fixture exits with the fix when numpy is missing)

GENERATOR_VERSION = 1
TASKS = ("gemm-w4a16-nvfp4", "gemm-bf16-mxfp4")

# ---- codecs, brute force ------------------------------------------------------------------------
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)


def e4m3_table():
    """The 127 finite non-negative e4m3fn values, by code 0x00 .. 0x7E (0x7F is NaN)."""
    v = []
    for b in range(0x7F):
        e, m = b >> 3, b & 7
        v.append(m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(v, dtype=np.float64)


E4M3 = e4m3_table()


def nearest_even(x, table):
    """Code of the nearest table value to |x| (ties to the even code; >= the max -> the max code)."""
    a = np.abs(np.asarray(x, dtype=np.float64))
    d = np.abs(a[..., None] - table)
    best = d.min(axis=-1, keepdims=True)
    cand = d == best
    even = cand & (np.arange(table.size) % 2 == 0)
    code = np.where(even.any(axis=-1), even.argmax(axis=-1), cand.argmax(axis=-1))
    return np.where(a >= table[-1], table.size - 1, code)


def e2m1_encode(x):
    return (nearest_even(x, E2M1) | (np.signbit(x) * 8)).astype(np.uint8)


def e4m3_encode(x):
    return (nearest_even(x, E4M3) | (np.signbit(x) * 0x80)).astype(np.uint8)


def e4m3_value(b):
    return E4M3[b & 0x7F] * np.where(b & 0x80, -1.0, 1.0)


def pack(codes):
    return (codes[:, 0::2] | (codes[:, 1::2] << np.uint8(4))).astype(np.uint8)


def blocks(K, b):
    return [(s, min(s + b, K)) for s in range(0, K, b)]


def nvfp4(w):
    N, K = w.shape
    amax = np.abs(w).max()
    g = np.float32(1.0) if amax == 0 else np.float32(amax) / np.float32(2688.0)
    codes = np.zeros((N, K), np.uint8)
    scale = np.zeros((N, (K + 15) // 16), np.uint8)
    for j, (k0, k1) in enumerate(blocks(K, 16)):
        blk = w[:, k0:k1]
        s = (np.abs(blk).max(axis=1) / np.float32(6.0)) / g          # fp32, two divisions
        scale[:, j] = e4m3_encode(s.astype(np.float32))
        denom = e4m3_value(scale[:, j]).astype(np.float32) * g       # fp32 product
        q = np.zeros(blk.shape, np.float32)
        nz = denom != 0
        q[nz] = blk[nz] / denom[nz, None]                              # fp32 division
        codes[:, k0:k1] = np.where(nz[:, None], e2m1_encode(q), 0)
    return pack(codes), scale, np.array([g], np.float32)


def mxfp4(w):
    N, K = w.shape
    codes = np.zeros((N, K), np.uint8)
    scale = np.zeros((N, (K + 31) // 32), np.uint8)
    for j, (k0, k1) in enumerate(blocks(K, 32)):
        blk = w[:, k0:k1].astype(np.float64)
        amax = np.abs(blk).max(axis=1)
        _, e = np.frexp(amax)                      # amax = f * 2^e, f in [0.5, 1): floor(log2) = e - 1
        shared = np.where(amax > 0, e - 1 - 2, -127)
        shared = np.clip(shared, -127, 127)
        scale[:, j] = (shared + 127).astype(np.uint8)
        codes[:, k0:k1] = e2m1_encode(np.ldexp(blk, -shared[:, None]))
    return pack(codes), scale


def expected(task, cfg, seed):
    M, N, K = cfg["M"], cfg["N"], cfg["K"]
    a = bf16_bits(normal(stream_key(seed, "A"), np.arange(M * K, dtype=np.uint64))).reshape(M, K)
    w = (normal(stream_key(seed, "W"), np.arange(N * K, dtype=np.uint64)) / np.sqrt(np.float32(K))).reshape(N, K)
    assert w.dtype == np.float32
    out = [("A", "BF16", [M, K], a)]
    if task == "gemm-w4a16-nvfp4":
        p, s, g = nvfp4(w)
        out += [("W.packed", "U8", [N, K // 2], p), ("W.scale", "U8", [N, (K + 15) // 16], s),
                ("W.global_scale", "F32", [1], g)]
    else:
        p, s = mxfp4(w)
        out += [("W.packed", "U8", [N, K // 2], p), ("W.scale", "U8", [N, (K + 31) // 32], s)]
    return out


# ---- the checks ---------------------------------------------------------------------------------
def self_test(ck):
    """The brute-force codecs on values worked by hand (the C++ tests' table)."""
    for x, c in ((0.25, 0), (0.75, 2), (1.25, 2), (1.75, 4), (2.5, 4), (3.5, 6), (5.0, 6), (7.0, 7), (-0.1, 8)):
        ck.eq(f"self-test e2m1({x})", int(e2m1_encode(np.float64(x))), c)
    for x, c in ((1.0625, 0x38), (1.9375, 0x40), (0.1, 0x1D), (470.0, 0x7E), (2.0 ** -10, 0)):
        ck.eq(f"self-test e4m3({x})", int(e4m3_encode(np.float32(x))), c)


def check(ck, tool, task, seed, folder):
    res = subprocess.run([tool, "build", task, "tiny", str(seed), folder, "2"], capture_output=True, text=True)
    if res.returncode != 0:
        ck.fail(f"{task} seed {seed}: gemm_fixture_tool build failed ({res.returncode}): {res.stderr.strip()}")
        return
    cfg = json.loads(subprocess.run([tool, "config", task, "tiny"], capture_output=True, text=True,
                                    check=True).stdout)
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    with open(os.path.join(folder, "model.safetensors"), "rb") as f:
        blob = f.read()
    tag = f"{task} seed {seed}"
    ck.eq(f"{tag}: manifest task", manifest["task"], task)
    ck.eq(f"{tag}: manifest seed", manifest["seed"], seed)
    ck.eq(f"{tag}: manifest generator_version", manifest["generator_version"], GENERATOR_VERSION)
    ck.eq(f"{tag}: whole-file SHA-256 (hashlib)", hashlib.sha256(blob).hexdigest(), manifest["file_sha256"])
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    ck.eq(f"{tag}: metadata task", meta.get("task"), task)
    want = expected(task, cfg, seed)
    order = sorted(header, key=lambda k: header[k]["data_offsets"][0])
    ck.eq(f"{tag}: tensor order", order, [t[0] for t in want])
    for name, dtype, shape, arr in want:
        if name not in header:
            ck.fail(f"{tag}: tensor {name} missing")
            continue
        h = header[name]
        ck.eq(f"{tag}: {name} dtype", h["dtype"], dtype)
        ck.eq(f"{tag}: {name} shape", h["shape"], shape)
        got = data[h["data_offsets"][0]:h["data_offsets"][1]]
        ck.eq(f"{tag}: {name} SHA-256 (manifest)", hashlib.sha256(got).hexdigest(), manifest["tensor_sha256"][name])
        exp = np.ascontiguousarray(arr).tobytes()
        if got != exp:
            g, w = np.frombuffer(got, np.uint8), np.frombuffer(exp, np.uint8)
            if g.size != w.size:
                ck.fail(f"{tag}: {name}: {g.size} bytes, numpy expects {w.size}")
            else:
                idx = np.nonzero(g != w)[0]
                ck.fail(f"{tag}: {name}: {idx.size} bytes differ, first at byte {idx[0]} "
                        f"(file 0x{g[idx[0]]:02x}, numpy 0x{w[idx[0]]:02x})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", required=True, help="path to the gemm_fixture_tool binary")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--keep", help="build the fixtures here instead of a temporary folder")
    args = ap.parse_args()
    ck = Checker()
    self_test(ck)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or tmp
        for task in TASKS:
            for seed in args.seeds:
                check(ck, args.tool, task, seed, os.path.join(root, f"{task}-seed{seed}"))
    if ck.failures:
        print(f"check_gemm_fixture.py: {len(ck.failures)} mismatch(es)", file=sys.stderr)
        return 1
    print(f"check_gemm_fixture.py: tiny fixtures of {', '.join(TASKS)} for seeds {args.seeds} match numpy byte for byte")
    return 0


if __name__ == "__main__":
    sys.exit(main())
