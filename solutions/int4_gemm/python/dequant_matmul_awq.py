"""dequant_matmul_awq.py: gemm-w4a16-int4 as a PyTorch baseline that takes the weights in AutoAWQ's
layout (INT4_LAYOUT = "awq"): the worked example of reading a checkpoint layout from Python.

AutoAWQ GEMM (include/nibble/nibble_gemm.h): W.qweight (K, N/8) int32, word [k, c] holds output
8c + order[i] at bits 4i..4i+3 with order = 0, 2, 4, 6, 1, 3, 5, 7; W.qzeros (K/128, N/8) packed the
same way; W.scales (K/128, N) fp16. W[n, k] = (q - zero) * scale per group of 128 along K.
prepare unpacks and dequantises W^T (K, N) once in fp32 and rounds it to bf16 (the oracle's
must-pass bf16_dequant row); run is one torch.mm (cuBLAS, fp32 accumulation) into a bf16 C.

    nibble grade --task gemm-w4a16-int4 --config tiny --solution solutions/int4_gemm/python/dequant_matmul_awq.py
"""
import torch

import nibble_abi

NAME = "python-dequant-matmul-awq"
OUTPUT_DTYPE = "bfloat16"
INT4_LAYOUT = "awq"

# Output 8c + j of a word sits in nibble AWQ_SLOT[j] (the inverse of the order 0,2,4,6,1,3,5,7).
AWQ_SLOT = (0, 4, 1, 5, 2, 6, 3, 7)


def unpack_awq(words):
    """(R, N/8) int32 AWQ words -> (R, N) int32 values 0..15 in output order."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=words.device)
    nibbles = (words.unsqueeze(-1) >> shifts) & 15  # (R, N/8, 8): nibble i of each word
    slot = torch.tensor(AWQ_SLOT, dtype=torch.long, device=words.device)
    return nibbles.index_select(-1, slot).reshape(words.shape[0], -1)


def dequantise_t(problem):
    """W^T (K, N) bf16 from the AWQ tensors."""
    if problem.scale_format != "float16" or problem.block != 128:
        raise nibble_abi.NotSupported(f"{problem.task}: expected fp16 scales per 128, got {problem.scale_format}")
    t = problem.tensors
    q = unpack_awq(torch.from_dlpack(t["W.qweight"]))                      # (K, N)
    z = unpack_awq(torch.from_dlpack(t["W.qzeros"])).repeat_interleave(128, dim=0)  # (K, N)
    s = torch.from_dlpack(t["W.scales"]).float().repeat_interleave(128, dim=0)       # (K, N)
    return ((q - z).float() * s).to(torch.bfloat16)


class Handle:
    def __init__(self, problem, stream):
        if problem.c_dtype != "bfloat16":
            raise nibble_abi.NotSupported(f"C as {problem.c_dtype}: this baseline writes bf16")
        self.stream = torch.cuda.ExternalStream(stream)
        with torch.cuda.stream(self.stream):
            self.w_t = dequantise_t(problem)
        self.views = {}

    def view(self, t):
        key = (t.data_ptr, t.byte_offset, t.shape)
        if key not in self.views:
            self.views[key] = torch.from_dlpack(t)
        return self.views[key]


def prepare(problem, stream):
    return Handle(problem, stream)


def run(handle, A, C, stream):
    with torch.cuda.stream(handle.stream):
        torch.mm(handle.view(A), handle.w_t, out=handle.view(C))


def teardown(handle, stream):
    handle.w_t = None
    handle.views = {}
