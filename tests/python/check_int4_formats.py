#!/usr/bin/env python3
"""check_int4_formats.py: an independent check of fixtures/int4_formats.h, in numpy.

tests/int4_formats_tool writes one random plain int4 triple (codes, fp16 scale bits, zeros; N = 24,
K = 384, groups of 128) and the C++ packers' AWQ, GPTQ, GPTQ-with-g_idx and compressed-tensors
images of it. This script packs the plain triple again, vectorised with numpy reshapes rather than
the C++ loops, from the formats' own sources:
  AutoAWQ  awq/modules/linear/gemm.py (WQLinear_GEMM.from_linear): qweight (K, N/8), nibble i of a
           word = column 8c + [0, 2, 4, 6, 1, 3, 5, 7][i]; qzeros the same; scales (K/G, N)
  GPTQ v1  auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py (QuantLinear.pack): qweight (K/8, N),
           nibble j = row 8r + j; qzeros (K/G, N/8) of zero - 1; g_idx (K,) indexes scale rows
  compressed-tensors pack_quantized.py (pack_to_int32): signed codes + 8, nibble i = element
           8c + i along the packed dim (1 for the weight, 0 for the zero point)
and compares every word.

  --packages: instead, check against the formats' own Python packages where they import
  (compressed_tensors' pack_to_int32, AutoAWQ's unpack_awq + reverse_awq_order); exit 77 (skipped,
  with the reasons) when none imports.

Exit 0 when everything matches; a mismatch prints what and where and exits 1.
usage: check_int4_formats.py --tool build/tests/int4_formats_tool [--packages]
"""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from safetensors.numpy import load_file
except ImportError as e:  # the test must fail, not vanish, without them
    print(f"check_int4_formats: {e}: run scripts/setup.sh (numpy, safetensors)")
    sys.exit(1)

SKIP = 77
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
LABELS = np.array([2, 0, 1])


def pack_last(v):
    """(..., 8) values 0..15 -> (...) int32 words, element i at bits 4i."""
    v = v.astype(np.uint32)
    shifts = (4 * np.arange(8, dtype=np.uint32))
    return np.bitwise_or.reduce(v << shifts, axis=-1).view(np.int32)


def plain_codes(packed):
    n, half = packed.shape
    codes = np.empty((n, 2 * half), dtype=np.int64)
    codes[:, 0::2] = packed & 0xF
    codes[:, 1::2] = packed >> 4
    return codes


def pack_awq(codes, zeros, scale):
    """AutoAWQ GEMM from codes (N, K), zeros (N, G), scale bits (N, G): qweight, qzeros, scales."""
    (N, K), G = codes.shape, zeros.shape[1]
    return (pack_last(codes.T.reshape(K, N // 8, 8)[..., AWQ_ORDER]),
            pack_last(zeros.T.reshape(G, N // 8, 8)[..., AWQ_ORDER]), scale.T)


def pack_gptq(codes, zeros, scale):
    """GPTQ v1 (no g_idx): qweight, qzeros (zero - 1), scales."""
    (N, K), G = codes.shape, zeros.shape[1]
    return (pack_last(codes.T.reshape(K // 8, 8, N).transpose(0, 2, 1)),
            pack_last((zeros.T - 1).reshape(G, N // 8, 8)), scale.T)


def pack_ct(codes, zeros, scale):
    """compressed-tensors pack-quantized: weight_packed, weight_scale, weight_zero_point, weight_shape."""
    (N, K), G = codes.shape, zeros.shape[1]
    return (pack_last(codes.reshape(N, K // 8, 8)), scale,
            pack_last(zeros.reshape(N // 8, 8, G).transpose(0, 2, 1)), np.array([N, K], dtype=np.int64))


def expected(t):
    codes = plain_codes(t["plain.packed"])             # (N, K)
    zeros = t["plain.zero"].astype(np.int64)            # (N, G)
    scale = t["plain.scale"].view(np.uint16)            # (N, G)
    N, K = codes.shape
    G = zeros.shape[1]
    e = {}
    e["awq.qweight"], e["awq.qzeros"], e["awq.scales"] = pack_awq(codes, zeros, scale)
    e["gptq.qweight"], gz, e["gptq.scales"] = pack_gptq(codes, zeros, scale)
    e["gptq.qzeros"] = gz
    e["gptq_g_idx.qweight"] = e["gptq.qweight"]
    moved_z = np.empty_like(gz)
    moved_z[LABELS] = gz
    moved_s = np.empty_like(scale.T)
    moved_s[LABELS] = scale.T
    e["gptq_g_idx.qzeros"] = moved_z
    e["gptq_g_idx.scales"] = moved_s
    e["gptq_g_idx.g_idx"] = LABELS[np.arange(K) // (K // G)].astype(np.int32)
    e["ct.weight_packed"], e["ct.weight_scale"], e["ct.weight_zero_point"], e["ct.weight_shape"] = pack_ct(codes, zeros, scale)
    e["ct_sym.weight_packed"] = e["ct.weight_packed"]
    return e


def view_bits(a):
    return a.view(np.uint16) if a.dtype == np.float16 else a


def compare(name, got, want):
    got, want = view_bits(np.asarray(got)), view_bits(np.asarray(want))
    if got.shape != want.shape:
        return [f"{name}: shape {got.shape}, expected {want.shape}"]
    bad = np.argwhere(got != want)
    if len(bad):
        i = tuple(bad[0])
        return [f"{name}: {len(bad)} words differ, first at {i}: {int(got[i]) & 0xFFFFFFFF:#010x} != {int(want[i]) & 0xFFFFFFFF:#010x}"]
    return []


def check_numpy(t):
    errors = []
    for name, want in expected(t).items():
        errors += compare(name, t[name], want)
    return errors


def check_packages(t):
    """Against the formats' own packages; returns (errors, reasons for what was skipped, checked)."""
    errors, skipped, checked = [], [], []
    codes = plain_codes(t["plain.packed"])
    zeros = t["plain.zero"].astype(np.int64)
    try:
        import torch
        try:
            from compressed_tensors.compressors.quantized_compressors.pack_quantized import pack_to_int32
        except ImportError:
            from compressed_tensors.compressors.pack_quantized import pack_to_int32
    except ImportError as e:
        skipped.append(f"compressed-tensors: {e}")
    else:
        packed = pack_to_int32(torch.tensor(codes - 8, dtype=torch.int8), 4).numpy()
        zp = pack_to_int32(torch.tensor(zeros - 8, dtype=torch.int8), 4, packed_dim=0).numpy()
        errors += compare("compressed_tensors.pack_to_int32(weight)", t["ct.weight_packed"], packed)
        errors += compare("compressed_tensors.pack_to_int32(zero_point)", t["ct.weight_zero_point"], zp)
        checked.append("compressed-tensors")
    try:
        import torch
        from awq.utils.packing_utils import reverse_awq_order, unpack_awq
    except ImportError as e:
        skipped.append(f"autoawq: {e}")
    else:
        iw, iz = unpack_awq(torch.tensor(t["awq.qweight"]), torch.tensor(t["awq.qzeros"]), 4)
        iw, iz = reverse_awq_order(iw, iz, 4)
        errors += compare("awq.unpack_awq(qweight)", (iw & 0xF).numpy().astype(np.int64), codes.T)
        errors += compare("awq.unpack_awq(qzeros)", (iz & 0xF).numpy().astype(np.int64), zeros.T)
        checked.append("autoawq")
    return errors, skipped, checked


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--packages", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "formats.safetensors")
        subprocess.run([args.tool, path], check=True)
        t = load_file(path)
    if args.packages:
        errors, skipped, checked = check_packages(t)
        for s in skipped:
            print(f"skipped: {s}")
        if not checked and not errors:
            print("SKIP: no format package imports (pip install autoawq compressed-tensors): nothing to cross-check")
            return SKIP
    else:
        errors = check_numpy(t)
        checked = ["numpy re-implementation"]
    for e in errors:
        print("MISMATCH", e)
    if errors:
        return 1
    print("int4 formats match:", ", ".join(checked))
    return 0


if __name__ == "__main__":
    sys.exit(main())
