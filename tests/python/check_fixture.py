#!/usr/bin/env python3
"""check_fixture.py: an independent check of the decode fixture, in numpy.

Builds the tiny fixture with the C++ generator (tests/fixture_tool) into a temporary folder, then
  1. opens it with the safetensors package (the reference Rust parser) and checks every tensor's
     name, order, dtype and shape against a tensor list derived here from the config's dims,
  2. recomputes every tensor's SHA-256 and the whole file's with hashlib and compares with
     manifest.json,
  3. re-implements generator version 1 (fixtures/rng.h: splitmix64 + FNV-1a counter hash,
     Irwin-Hall normals; fixtures/decode/quantise.h: RTN int4 with a bf16 scale; fixtures/decode/decode_fixture.h: the
     distribution) in numpy and compares every byte of every tensor.

Exit status 0 only if everything matches; any mismatch prints what and where and exits 1. Missing
numpy/safetensors exits 2 with the fix (never a silent skip).

usage: check_fixture.py --tool build/tests/fixture_tool [--config tiny] [--seeds 0 1] [--keep DIR]
"""
import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import safetensors
    import safetensors.numpy  # noqa: F401  (the numpy frontend; BF16 goes through deserialize)
except ImportError as e:  # pragma: no cover
    print(f"check_fixture.py: {e}. numpy and safetensors are required: run scripts/setup.sh",
          file=sys.stderr)
    sys.exit(2)

M64 = (1 << 64) - 1
G = 0x9E3779B97F4A7C15
GENERATOR_VERSION = 1


# ---- generator version 1, re-implemented -------------------------------------------------------
def mix64_int(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def mix64(z):
    """splitmix64 finaliser on a uint64 array (numpy array arithmetic wraps mod 2^64)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def stream_key(seed, name):
    return mix64_int(mix64_int((seed + G) & M64) ^ fnv1a64(name))


def draw(key, c):
    c = np.asarray(c, dtype=np.uint64)
    return mix64(np.uint64(key) + (c + np.uint64(1)) * np.uint64(G))


def uniform(key, c):
    return (draw(key, c) >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -24)


def normal(key, e):
    c = np.asarray(e, dtype=np.uint64) * np.uint64(4)
    s = uniform(key, c) + uniform(key, c + np.uint64(1))
    s = s + uniform(key, c + np.uint64(2))
    s = s + uniform(key, c + np.uint64(3))
    s = s - np.float32(2.0)
    return s * np.sqrt(np.float32(3.0))


def bf16_bits(x):
    """fp32 -> bf16 bits, round to nearest even (no NaNs occur here)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    u = u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
    return (u >> np.uint32(16)).astype(np.uint16)


def bf16_value(bits):
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def quantise(w, group):
    """(out, in) fp32 -> packed (out, in/2) u8, scale (out, in/group) bf16 bits, zero u8."""
    out, n = w.shape
    g = w.reshape(out, n // group, group)
    mn, mx = g.min(axis=2), g.max(axis=2)
    sbits = bf16_bits((mx - mn) / np.float32(15.0))
    sbits[bf16_value(sbits) == 0] = 0x0080  # smallest positive normal bf16
    scale = bf16_value(sbits)
    zero = np.clip(np.rint(-mn / scale), 0, 15).astype(np.float32)
    code = np.clip(np.rint(g / scale[:, :, None]) + zero[:, :, None], 0, 15).astype(np.uint8)
    code = code.reshape(out, n)
    packed = code[:, 0::2] | (code[:, 1::2] << np.uint8(4))  # low nibble = even index
    return packed, sbits, zero.astype(np.uint8)


def expected_tensors(cfg, seed):
    """Every tensor of the fixture, generated here: dict name -> (dtype str, shape, numpy array)."""
    L, d, ffn, nq, nkv, hd, V, group = (cfg[k] for k in ("layers", "d", "ffn", "n_q", "n_kv", "hd", "vocab", "group"))
    B, S, P, T = cfg["batch"], cfg["max_seq"], cfg["prefill"], cfg["decode_steps"]
    out = {}
    order = []

    def add(name, dtype, arr):
        out[name] = (dtype, list(arr.shape), arr)
        order.append(name)

    def weight(name, rows, cols):
        e = np.arange(rows * cols, dtype=np.uint64)
        w = (normal(stream_key(seed, name), e) / np.sqrt(np.float32(cols))).reshape(rows, cols)
        assert w.dtype == np.float32
        p, s, z = quantise(w, group)
        add(name + ".packed", "U8", p)
        add(name + ".scale", "BF16", s)
        add(name + ".zero", "U8", z)

    def norm(name):
        u = uniform(stream_key(seed, name), np.arange(d, dtype=np.uint64))
        add(name, "BF16", bf16_bits(np.float32(1.0) + np.float32(0.2) * (u - np.float32(0.5))))

    weight("embed", V, d)
    norm("final_norm")
    for i in range(L):
        p = f"layers.{i}."
        norm(p + "in_norm")
        norm(p + "post_norm")
        for name, rows, cols in (("q", nq * hd, d), ("k", nkv * hd, d), ("v", nkv * hd, d), ("o", d, nq * hd),
                                 ("gate", ffn, d), ("up", ffn, d), ("down", d, ffn)):
            weight(p + name, rows, cols)
    for i in range(L):
        for kv in ("k", "v"):
            name = f"kv.{i}.{kv}"
            x = np.zeros((B, nkv, S, hd), dtype=np.uint16)
            e = np.arange(B * nkv * S * hd, dtype=np.uint64).reshape(B, nkv, S, hd)[:, :, :P, :]
            x[:, :, :P, :] = bf16_bits(normal(stream_key(seed, name), e))
            add(name, "BF16", x)
    e = np.arange(T * B, dtype=np.uint64)
    add("tokens", "I64", (draw(stream_key(seed, "tokens"), e) % np.uint64(V)).astype(np.int64).reshape(T, B))
    return out, order


# ---- the checks ---------------------------------------------------------------------------------
class Checker:
    def __init__(self):
        self.failures = []

    def fail(self, msg):
        self.failures.append(msg)
        print("FAIL: " + msg, file=sys.stderr)

    def eq(self, what, got, want):
        if got != want:
            self.fail(f"{what}: got {got!r}, expected {want!r}")


def first_difference(got, want):
    g, w = np.frombuffer(got, np.uint8), np.frombuffer(want, np.uint8)
    idx = np.nonzero(g != w)[0]
    return int(idx[0]), int(idx.size)


def check_seed(ck, tool, cfg, seed, folder):
    res = subprocess.run([tool, "build", cfg["config"], str(seed), folder, "2"], capture_output=True, text=True)
    if res.returncode != 0:
        ck.fail(f"fixture_tool build failed ({res.returncode}): {res.stderr.strip()}")
        return
    model = os.path.join(folder, "model.safetensors")
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    with open(model, "rb") as f:
        blob = f.read()

    tag = f"seed {seed}"
    ck.eq(f"{tag}: manifest task", manifest["task"], cfg["task"])
    ck.eq(f"{tag}: manifest config", manifest["config"], cfg["config"])
    ck.eq(f"{tag}: manifest seed", manifest["seed"], seed)
    ck.eq(f"{tag}: manifest generator_version", manifest["generator_version"], GENERATOR_VERSION)
    ck.eq(f"{tag}: manifest file", manifest["file"], "model.safetensors")
    ck.eq(f"{tag}: file size", len(blob), manifest["file_bytes"])
    ck.eq(f"{tag}: whole-file SHA-256 (hashlib)", hashlib.sha256(blob).hexdigest(), manifest["file_sha256"])

    # The header as written: 8-byte length, canonical JSON padded to a multiple of 8.
    (n,) = struct.unpack("<Q", blob[:8])
    header = blob[8:8 + n]
    ck.eq(f"{tag}: header length % 8", n % 8, 0)
    parsed = json.loads(header)
    canonical = json.dumps(parsed, sort_keys=True, separators=(",", ":")).encode()
    ck.eq(f"{tag}: header is sorted compact JSON + spaces", header, canonical + b" " * (n - len(canonical)))

    # The reference parser: safetensors' own validation of offsets and sizes.
    views = dict(safetensors.deserialize(blob))
    with safetensors.safe_open(model, framework="np") as f:
        meta = f.metadata()
    ck.eq(f"{tag}: __metadata__", meta, {"task": cfg["task"], "config": cfg["config"], "seed": str(seed),
                                        "generator_version": str(GENERATOR_VERSION)})

    want, order = expected_tensors(cfg, seed)
    file_order = sorted((k for k in parsed if k != "__metadata__"), key=lambda k: parsed[k]["data_offsets"][0])
    ck.eq(f"{tag}: tensor names in file order", file_order, order)
    ck.eq(f"{tag}: manifest tensor list", sorted(manifest["tensor_sha256"]), sorted(order))
    for name in order:
        if name not in views:
            ck.fail(f"{tag}: tensor {name} missing from the file")
            continue
        v = views[name]
        dtype, shape, arr = want[name]
        ck.eq(f"{tag}: {name} dtype", v["dtype"], dtype)
        ck.eq(f"{tag}: {name} shape", list(v["shape"]), shape)
        data = bytes(v["data"])
        ck.eq(f"{tag}: {name} SHA-256 (hashlib vs manifest)", hashlib.sha256(data).hexdigest(),
              manifest["tensor_sha256"].get(name))
        ref = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
        if data != ref:
            if len(data) != len(ref):
                ck.fail(f"{tag}: {name}: {len(data)} bytes in the file, numpy generator gives {len(ref)}")
            else:
                i, count = first_difference(data, ref)
                ck.fail(f"{tag}: {name}: {count} bytes differ from the numpy re-implementation, first at byte {i} "
                        f"(file {data[i]:#04x}, numpy {ref[i]:#04x})")
    print(f"seed {seed}: {len(order)} tensors, {len(blob)} bytes, sha256 {manifest['file_sha256']}: "
          f"{'OK' if not ck.failures else 'MISMATCH'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", required=True, help="path to the fixture_tool executable")
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--keep", help="build into this folder instead of a temporary one")
    args = ap.parse_args()

    res = subprocess.run([args.tool, "config", args.config], capture_output=True, text=True)
    if res.returncode != 0:
        print(f"check_fixture.py: {args.tool} config {args.config} failed: {res.stderr.strip()}", file=sys.stderr)
        return 1
    cfg = json.loads(res.stdout)
    if cfg["generator_version"] != GENERATOR_VERSION:
        print(f"check_fixture.py re-implements generator version {GENERATOR_VERSION}, the C++ one is "
              f"{cfg['generator_version']}: update this script with the generator", file=sys.stderr)
        return 1

    ck = Checker()
    for seed in args.seeds:
        if args.keep:
            folder = os.path.join(args.keep, f"seed{seed}")
            os.makedirs(folder, exist_ok=True)
            check_seed(ck, args.tool, cfg, seed, folder)
        else:
            with tempfile.TemporaryDirectory(prefix="nibble-check-fixture-") as folder:
                check_seed(ck, args.tool, cfg, seed, folder)
    if ck.failures:
        print(f"check_fixture.py: {len(ck.failures)} mismatch(es) between the C++ fixture and the numpy "
              f"re-implementation", file=sys.stderr)
        return 1
    print("check_fixture.py: every tensor matches the numpy re-implementation byte for byte")
    return 0


if __name__ == "__main__":
    sys.exit(main())
