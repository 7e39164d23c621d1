"""dense_bf16_graph.py: megakernel-int4-weight-decode with every weight dequantised once to bf16, the
step (decode_graph.py) replayed in a CUDA graph: the "dense bf16 in a CUDA graph" PyTorch anchor.

build_model dequantises each int4 weight (W = (code - zero) * scale, exact in fp32) and stores it
as bf16 (one rounding, 2^-9 relative); each projection is F.linear on bf16 (cuBLAS, fp32
accumulation) with the fp32 activation rounded to bf16 on the way in. Weights read per token:
2 bytes per parameter (6.4 GB on the full config), against 0.53 for the int4 layouts.

    nibble grade --solution solutions/decode/python/dense_bf16_graph.py --config tiny
"""
import torch
import torch.nn.functional as F

from decode_graph import PROJECTIONS, DecodeGraph, dequantise, decode_step, teardown  # noqa: F401

NAME = "python-dense-bf16-graph"


class DenseBf16:
    def __init__(self, model):
        names = ["embed"] + [f"layers.{i}.{p}" for i in range(model.cfg.layers) for p in PROJECTIONS]
        self.w = {n: dequantise(model, n, torch.bfloat16) for n in names}

    def linear(self, name, x):
        return F.linear(x.to(torch.bfloat16), self.w[name]).float()


def build_model(model, stream):
    with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
        return DecodeGraph(model, stream, DenseBf16(model))
