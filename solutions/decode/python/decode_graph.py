"""decode_graph.py: one decode step of megakernel-int4-weight-decode in PyTorch, replayed in a CUDA graph.

Shared by the bundled Python decode solutions (dense_bf16_graph.py, tinygemm_graph.py,
triton_gemv_graph.py); each supplies only its projections (`Linears`: the weights in its own layout
and `linear(name, x) -> y`). The math is the task's (include/nibble/nibble.h; the fp32 definition is
reference/decode/reference_abi.cu):

    h = dequant(embed)[token]; per layer: a = RMSNorm(h) * in_norm; q, k, v = a W^T;
    RoPE rotate-half (pairs i, i + hd/2), angle pos * theta^(-2i/hd) in fp64; k, v -> bf16 cache
    slot pos; attention over slots 0..pos (GQA: query head j reads kv head j // (n_q / n_kv)),
    softmax(q k^T / sqrt(hd)); h += o(attn); a = RMSNorm(h) * post_norm;
    h += down(silu(gate a) * up a); logits = (RMSNorm(h) * final_norm) dequant(embed)^T.

The residual stream, norms, RoPE and attention are fp32, as in the reference. A CUDA graph needs
fixed addresses and shapes, so the step reads its position from a device tensor: RoPE's cos/sin
come from a table indexed by it, K and V are written with index_copy_ at it, and attention covers
all max_seq slots with the slots after pos masked out (what gpt-fast does: it reads the whole cache,
max_seq * n_kv * hd * 4 bytes per layer, for a graph that never changes).
"""
import math

import torch
import torch.nn.functional as F


def tensor(model, name):
    """The fixture tensor `name` as a torch tensor over the harness's memory (zero-copy)."""
    return torch.from_dlpack(model.tensors[name])


def unpack_int4(packed):
    """(out, in/2) uint8, LOW nibble = EVEN input index -> (out, in) int16 codes 0..15."""
    lo = (packed & 0xF).to(torch.int16)
    hi = (packed >> 4).to(torch.int16)
    return torch.stack((lo, hi), dim=-1).reshape(packed.shape[0], packed.shape[1] * 2)


def dequantise(model, prefix, dtype=torch.float32):
    """W[o, i] = (code[o, i] - zero[o, i / group]) * scale[o, i / group] of weight `prefix`, computed
    in fp32 (exact: a 4-bit difference times a bf16 scale) and stored as `dtype`."""
    g = model.cfg.group
    codes = unpack_int4(tensor(model, prefix + ".packed"))
    zero = tensor(model, prefix + ".zero").to(torch.int16).repeat_interleave(g, dim=1)[:, : codes.shape[1]]
    scale = tensor(model, prefix + ".scale").float().repeat_interleave(g, dim=1)[:, : codes.shape[1]]
    return ((codes - zero).float() * scale).to(dtype)


PROJECTIONS = ("q", "k", "v", "o", "gate", "up", "down")


class DecodeGraph:
    """The step's static buffers, its CUDA graph and the replay. `linears` maps a weight prefix
    ("layers.3.q", "embed") to its projection: linears.linear(prefix, x (batch, in) fp32) -> (batch, out)."""

    def __init__(self, model, stream, linears):
        c = model.cfg
        self.cfg, self.linears = c, linears
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.stream = torch.cuda.ExternalStream(stream)
        self.embed_rows = dequantise(model, "embed", torch.float32)  # (vocab, d): the lookup
        self.final_norm = tensor(model, "final_norm").float()
        self.in_norm = [tensor(model, f"layers.{i}.in_norm").float() for i in range(c.layers)]
        self.post_norm = [tensor(model, f"layers.{i}.post_norm").float() for i in range(c.layers)]
        self.k_cache = [tensor(model, f"kv.{i}.k") for i in range(c.layers)]  # (batch, n_kv, max_seq, hd) bf16
        self.v_cache = [tensor(model, f"kv.{i}.v") for i in range(c.layers)]
        # RoPE: angle pos * theta^(-2i/hd) and its cos/sin in fp64, then fp32, as the reference.
        half = c.hd // 2
        inv_freq = torch.tensor([c.theta ** (-2.0 * i / c.hd) for i in range(half)], dtype=torch.float64)
        angles = torch.arange(c.max_seq, dtype=torch.float64)[:, None] * inv_freq[None, :]
        self.cos = angles.cos().float().to(self.device)
        self.sin = angles.sin().float().to(self.device)
        self.slots = torch.arange(c.max_seq, device=self.device)
        # The graph's inputs and output.
        self.tokens = torch.zeros(c.batch, dtype=torch.int64, device=self.device)
        self.pos = torch.zeros(1, dtype=torch.int64, device=self.device)
        self.logits = torch.zeros(c.batch, c.vocab, dtype=torch.float32, device=self.device)
        self.graph = None
        self._harness = {}  # data_ptr -> torch view of a harness buffer (token_ids, logits)
        self.capture()

    def rmsnorm(self, x, gain):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.cfg.eps) * gain

    def rope(self, x):
        """x (batch, heads, hd) rotated at self.pos (rotate-half pairs)."""
        half = self.cfg.hd // 2
        cos = self.cos.index_select(0, self.pos)[:, None, :]
        sin = self.sin.index_select(0, self.pos)[:, None, :]
        a, b = x[..., :half], x[..., half:]
        return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)

    def attention(self, i, q, k, v):
        c = self.cfg
        b = c.batch
        # K and V appended at slot pos, rounded to bf16, in the harness's caches (in place).
        self.k_cache[i].index_copy_(2, self.pos, k.to(torch.bfloat16)[:, :, None, :])
        self.v_cache[i].index_copy_(2, self.pos, v.to(torch.bfloat16)[:, :, None, :])
        group = c.n_q // c.n_kv
        qg = q.view(b, c.n_kv, group, c.hd)
        keys = self.k_cache[i].float()  # (b, n_kv, max_seq, hd)
        scores = torch.einsum("bkgd,bksd->bkgs", qg, keys) / math.sqrt(c.hd)
        scores = scores.masked_fill((self.slots > self.pos)[None, None, None, :], float("-inf"))
        p = torch.softmax(scores, dim=-1)
        out = torch.einsum("bkgs,bksd->bkgd", p, self.v_cache[i].float())
        return out.reshape(b, c.n_q * c.hd)

    def step(self):
        """One decode step from self.tokens and self.pos into self.logits (captured in the graph)."""
        c, lin = self.cfg, self.linears.linear
        h = self.embed_rows.index_select(0, self.tokens)
        for i in range(c.layers):
            p = f"layers.{i}."
            a = self.rmsnorm(h, self.in_norm[i])
            q = self.rope(lin(p + "q", a).view(c.batch, c.n_q, c.hd))
            k = self.rope(lin(p + "k", a).view(c.batch, c.n_kv, c.hd))
            v = lin(p + "v", a).view(c.batch, c.n_kv, c.hd)
            h = h + lin(p + "o", self.attention(i, q, k, v))
            a = self.rmsnorm(h, self.post_norm[i])
            h = h + lin(p + "down", F.silu(lin(p + "gate", a)) * lin(p + "up", a))
        self.logits.copy_(lin("embed", self.rmsnorm(h, self.final_norm)))

    def capture(self):
        """Warm up (Triton compiles, cuBLAS picks its kernels) and capture the step. The warm-up
        writes K and V at the last slot: that slot of every cache is saved first and put back."""
        c = self.cfg
        last = c.max_seq - 1
        saved = [(k[:, :, last].clone(), v[:, :, last].clone()) for k, v in zip(self.k_cache, self.v_cache)]
        with torch.cuda.stream(self.stream):
            self.pos.fill_(last)
            for _ in range(2):
                self.step()
            self.stream.synchronize()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, stream=self.stream):
                self.step()
            for (k, v), (ks, vs) in zip(zip(self.k_cache, self.v_cache), saved):
                k[:, :, last].copy_(ks)
                v[:, :, last].copy_(vs)
            self.stream.synchronize()

    def _view(self, t):
        key = (t.data_ptr, t.byte_offset, t.shape)
        v = self._harness.get(key)
        if v is None:
            v = self._harness[key] = torch.from_dlpack(t)
        return v

    def replay(self, token_ids, pos, logits):
        """The timed call: inputs into the graph's buffers, one replay, the logits out."""
        with torch.cuda.stream(self.stream):
            self.tokens.copy_(self._view(token_ids))
            self.pos.fill_(pos)
            self.graph.replay()
            self._view(logits).copy_(self.logits)


def decode_step(handle, token_ids, pos, logits, stream):
    handle.replay(token_ids, pos, logits)


def teardown(handle, stream):
    handle.graph = None
    handle.linears = None
