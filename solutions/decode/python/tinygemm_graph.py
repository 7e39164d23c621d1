"""tinygemm_graph.py: megakernel-int4-weight-decode on PyTorch's int4 weight-only kernel (tinygemm,
torch.ops.aten._weight_int4pack_mm, gpt-fast's path), the step (decode_graph.py) in a CUDA graph:
the "PyTorch int4 tinygemm in a CUDA graph" anchor.

nibble's layout -> tinygemm's, once in build_model:
  codes   nibble packs LOW nibble = EVEN k; _convert_weight_to_int4pack (torch >= 2.5) takes uint8
          (N, K/2) with the EVEN k in the HIGH nibble: the nibbles of every byte are swapped.
  scales  tinygemm computes w = (q - 8) * scale + zero with a bf16 zero per group, so
          zero = (8 - z) * scale, rounded to bf16 (the one inexact step: 2^-9 of the zero term);
          scales_and_zeros is (K/group, N, 2) bf16, [..., 0] the scale and [..., 1] the zero.
Activations go in as bf16; the output (bf16, fp32 accumulation) comes back as fp32. tinygemm needs
K % (16 * inner_k_tiles) == 0 and N % 8 == 0: the largest of inner_k_tiles 8, 4, 2 that fits.

    nibble grade --solution solutions/decode/python/tinygemm_graph.py --config tiny
"""
import torch

import nibble_abi
from decode_graph import PROJECTIONS, DecodeGraph, decode_step, tensor, teardown  # noqa: F401

NAME = "python-tinygemm-graph"


def to_tinygemm(model, prefix):
    """(packed for _weight_int4pack_mm, scales_and_zeros, group) of weight `prefix`."""
    packed = tensor(model, prefix + ".packed")  # (N, K/2) uint8
    n, k = packed.shape[0], packed.shape[1] * 2
    group = model.cfg.group
    tiles = next((t for t in (8, 4, 2) if k % (16 * t) == 0), None)
    if tiles is None or n % 8 != 0 or group not in (32, 64, 128, 256) or k % group != 0:
        raise nibble_abi.NotSupported(f"tinygemm cannot take {prefix} ({n} x {k}, group {group})")
    swapped = ((packed & 0xF) << 4) | (packed >> 4)
    w = torch.ops.aten._convert_weight_to_int4pack(swapped.contiguous(), tiles)
    scale = tensor(model, prefix + ".scale").float()  # (N, K/group)
    zero = tensor(model, prefix + ".zero").float()
    sz = torch.stack((scale, (8.0 - zero) * scale), dim=-1).to(torch.bfloat16)  # (N, K/group, 2)
    return w, sz.transpose(0, 1).contiguous(), group


class Tinygemm:
    def __init__(self, model):
        names = ["embed"] + [f"layers.{i}.{p}" for i in range(model.cfg.layers) for p in PROJECTIONS]
        self.w = {n: to_tinygemm(model, n) for n in names}

    def linear(self, name, x):
        w, sz, group = self.w[name]
        return torch.ops.aten._weight_int4pack_mm(x.to(torch.bfloat16), w, group, sz).float()


def build_model(model, stream):
    with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
        return DecodeGraph(model, stream, Tinygemm(model))
