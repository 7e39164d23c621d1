"""triton_gemv_graph.py: megakernel-int4-weight-decode with a Triton int4 GEMV per projection, the
step (decode_graph.py) in a CUDA graph: the worked example for Python kernel authors.

The kernel reads nibble's layout as stored (no repack): W.packed (N, K/2) uint8, LOW nibble = EVEN
k; W.scale (N, K/group) bf16; W.zero (N, K/group) uint8; W[n, k] = (code - zero) * scale. One
program computes BLOCK_N outputs, walking K one quantisation group at a time: it loads the group's
BLOCK_N x group/2 bytes, splits them into the even and odd codes, dequantises both in fp32 and dots
them with the even and odd elements of x (fp32), accumulating in fp32. Bytes moved per call: N*K/2
codes + N*K/group * 3 (scale, zero) + 4K (x) + 4N (y); a batch-1 GEMV is bound by the first term.

    nibble grade --solution solutions/decode/python/triton_gemv_graph.py --config tiny
"""
import torch
import triton
import triton.language as tl

import nibble_abi
from decode_graph import PROJECTIONS, DecodeGraph, decode_step, tensor, teardown  # noqa: F401

NAME = "python-triton-gemv-graph"


@triton.jit
def int4_gemv_kernel(x_ptr, packed_ptr, scale_ptr, zero_ptr, y_ptr, N, K, GROUPS,
                     GROUP: tl.constexpr, BLOCK_N: tl.constexpr):
    """y[b, n] = sum_k x[b, k] * (code[n, k] - zero[n, k // GROUP]) * scale[n, k // GROUP]."""
    pid_n = tl.program_id(0)
    b = tl.program_id(1)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    half = tl.arange(0, GROUP // 2)  # byte j of a group holds codes 2j (low) and 2j + 1 (high)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for g in range(0, GROUPS):
        k0 = g * GROUP
        byte = tl.load(packed_ptr + rows[:, None] * (K // 2) + (k0 // 2 + half)[None, :],
                       mask=row_ok[:, None], other=0)
        lo = (byte & 0xF).to(tl.float32)
        hi = (byte >> 4).to(tl.float32)
        scale = tl.load(scale_ptr + rows * GROUPS + g, mask=row_ok, other=0).to(tl.float32)
        zero = tl.load(zero_ptr + rows * GROUPS + g, mask=row_ok, other=0).to(tl.float32)
        x_even = tl.load(x_ptr + b * K + k0 + 2 * half)
        x_odd = tl.load(x_ptr + b * K + k0 + 2 * half + 1)
        dot = tl.sum((lo - zero[:, None]) * x_even[None, :] + (hi - zero[:, None]) * x_odd[None, :], axis=1)
        acc += dot * scale
    tl.store(y_ptr + b * N + rows, acc, mask=row_ok)


class TritonGemv:
    BLOCK_N = 16

    def __init__(self, model):
        self.group = model.cfg.group
        self.w = {}
        for n in ["embed"] + [f"layers.{i}.{p}" for i in range(model.cfg.layers) for p in PROJECTIONS]:
            packed = tensor(model, n + ".packed")
            if (packed.shape[1] * 2) % self.group != 0:
                raise nibble_abi.NotSupported(f"{n}: K is not a multiple of the group ({self.group})")
            self.w[n] = (packed, tensor(model, n + ".scale"), tensor(model, n + ".zero"))

    def linear(self, name, x):
        packed, scale, zero = self.w[name]
        n, k = packed.shape[0], packed.shape[1] * 2
        x = x.contiguous()
        y = torch.empty(x.shape[0], n, dtype=torch.float32, device=x.device)
        grid = (triton.cdiv(n, self.BLOCK_N), x.shape[0])
        int4_gemv_kernel[grid](x, packed, scale, zero, y, n, k, k // self.group, GROUP=self.group, BLOCK_N=self.BLOCK_N)
        return y


def build_model(model, stream):
    with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
        return DecodeGraph(model, stream, TritonGemv(model))
