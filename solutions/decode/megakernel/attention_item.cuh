// attention_item.cuh: one attention item of the dataflow megakernel (issue 21 step 3; NOTES.md
// "v2"): KV head h, one chunk of the sequence, on the consumer warps, its cached K/V rows from the
// page stream (page_stream.cuh, kStreamKv: the producer copies them whatever the dependency state:
// the cache rows below pos are not written by this step). The item writes its partial (the
// log2-domain max m, the sum l and the weighted V o of each of the KV head's query heads) where
// combine_chunks (attention.cuh) merges the chunks: o-proj's input build.
//
// Math as v1's attention stage (attention.cuh): RoPE on q and on this step's k with the table's
// {cos, sin}, the pair (i, i + hd/2); q pre-multiplied by log2(e)/sqrt(hd) so every exponential is
// exp2; this step's k and v rounded to bf16 (and appended to the cache at pos by the item whose
// chunk ends at pos); fp32 scores and online softmax on the CUDA cores: in a page, lane (j = lane/4,
// quarter = lane%4) scores position j over a quarter of hd (its words in a rotated order:
// score_rotation), the quarters summed by two shuffles; each lane owns hd/32 elements of o per
// query head.
#pragma once

#include <cmath>
#include <cstdint>

#include "megakernel.h"
#include "page_stream.cuh"
#include "segment_gemv.cuh"

namespace nibble::megakernel::v2 {

/** One item's inputs and outputs. Positions [s0, s1) of the sequence 0..pos: the cached ones,
 *  [s0, min(s1, pos)), come from the stream; pos itself, when s1 == pos + 1, from k_new / v_new. */
struct AttnItem {
  const float* q = nullptr;      ///< (rep, hd) this KV head's query heads, pre-RoPE (the q|k|v vector)
  const float* k_new = nullptr;  ///< (hd) this step's k of the head, pre-RoPE
  const float* v_new = nullptr;  ///< (hd)
  const float2* rope = nullptr;  ///< (hd/2) {cos, sin} of pos (the RoPE table's row; shared memory)
  uint16_t* k_slot = nullptr;    ///< cache row pos of the head (bf16), written when s1 == pos + 1
  uint16_t* v_slot = nullptr;
  float* part = nullptr;         ///< the first query head's partial of this chunk (partial_floats)
  int part_stride = 0;           ///< floats from one query head's partial to the next
  int rep = 0, pos = 0, s0 = 0, s1 = 0;
};

/** The partials' layout of the dataflow kernel (DataflowParams::part): per query head and chunk,
 *  {m, l, 2 floats of padding, o[hd]} (m: the log2-domain max, l: the sum, o: the weighted V), so that
 *  o starts 16 bytes in and o-proj's input build (attn_input) reads it as float4. */
inline constexpr int kPartialO = 4;
NIBBLE_MK_HD constexpr int partial_floats(int hd) { return hd + kPartialO; }

/** Shared floats of attention_item<HD, W>: rotated q, this step's k and v (bf16 values), and each
 *  warp's (m, l, o) per query head. */
template <int HD, int W>
NIBBLE_MK_HD constexpr int attention_item_floats() {
  return kMaxRep * HD + 2 * HD + W * kMaxRep * (HD + 2);
}

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }
__device__ __forceinline__ uint16_t bf16_rn(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

/** One warp's softmax state for up to kMaxRep query heads, hd/32 elements of o per lane. */
template <int HD>
struct AttnAcc {
  static constexpr int E = HD / 32;
  float m[kMaxRep], l[kMaxRep], o[kMaxRep][E];
};

/** Lane (j, quarter)'s rotation of its quarter's words (bf16 pairs, QW = hd/8 of them) in the
 *  score loop: K rows lie 2 hd bytes apart in a page, so at hd 128 the 8 positions' word w falls in
 *  one bank, and quarters 0 and 2 (1 and 3) in the same 16: read in the same order by every lane, a
 *  score's load was a 16-way bank conflict, which made the item bound by shared memory (~11.8 us a
 *  layer on an H100, NOTES.md "v2.4"). Lane (j, q) starts at word 2j + q/2 + 8 (q % 2) at hd 128
 *  (QW 16) and j + 4 (q / 2) at hd 64 (QW 8): distinct banks for the K words of all 32 lanes and
 *  for q's float2 within each half-warp. */
template <int HD>
__device__ __forceinline__ int score_rotation(int j, int quarter) {
  constexpr int QW = HD / 8;
  static_assert(QW == 8 || QW == 16, "hd 64 or 128: the rotation is a power-of-two mask");
  if constexpr (QW == 16)
    return (2 * j + (quarter >> 1) + 8 * (quarter & 1)) & (QW - 1);
  else
    return (j + 4 * (quarter >> 1)) & (QW - 1);
}

/** E consecutive bf16 (E = 2 or 4; 2E-byte aligned) as floats: one shared-memory load. */
template <int E>
__device__ __forceinline__ void load_bf16(const uint16_t* v, float (&f)[E]) {
  static_assert(E == 2 || E == 4, "hd 64 or 128");
  if constexpr (E == 4) {
    const uint2 u = *reinterpret_cast<const uint2*>(v);
    f[0] = bf16_lo(u.x), f[1] = bf16_hi(u.x), f[2] = bf16_lo(u.y), f[3] = bf16_hi(u.y);
  } else {
    const uint32_t u = *reinterpret_cast<const uint32_t*>(v);
    f[0] = bf16_lo(u), f[1] = bf16_hi(u);
  }
}

/** Fold n (<= 8 x ...) positions into the warp's state: K rows at kr, V rows at vr (bf16, hd each,
 *  consecutive, 16-byte aligned), scores against q_s (rep, hd). All lanes.
 *
 *  The query heads go through each stage together (v2.7; NOTES.md "v2.7"): a K word is loaded once
 *  for all of them and a V row once, and their shuffle and exponential chains are independent, so
 *  they overlap (one head after another paid every chain's latency rep times). The arithmetic per
 *  head and its order are v2.4's. Loops over kMaxRep are unrolled with a warp-uniform guard: a
 *  runtime bound would index acc's arrays dynamically, which puts them in local memory. */
template <int HD>
__device__ __forceinline__ void attend_rows(const uint16_t* kr, const uint16_t* vr, uint32_t n, const float* q_s, int rep,
                                            AttnAcc<HD>& acc) {
  constexpr int E = AttnAcc<HD>::E, Q = HD / 4, QW = Q / 2;  // o elements per lane; score elements, words per lane
  const int lane = int(threadIdx.x & 31), jl = lane >> 2, quarter = lane & 3;
  const int rot = score_rotation<HD>(jl, quarter);
  for (uint32_t j0 = 0; j0 < n; j0 += 8) {
    const uint32_t j = j0 + uint32_t(jl);
    const bool valid = j < n;
    float s[kMaxRep];
#pragma unroll
    for (int r = 0; r < kMaxRep; ++r) s[r] = 0.f;
    if (valid) {
      const uint32_t* k2 = reinterpret_cast<const uint32_t*>(kr + size_t(j) * HD + quarter * Q);
#pragma unroll 4
      for (int e = 0; e < QW; ++e) {
        const int wd = (e + rot) & (QW - 1);
        const uint32_t kw = k2[wd];
        const float lo = bf16_lo(kw), hi = bf16_hi(kw);
#pragma unroll
        for (int r = 0; r < kMaxRep; ++r)
          if (r < rep) {
            const float2 qq = reinterpret_cast<const float2*>(q_s + r * HD + quarter * Q)[wd];
            s[r] = fmaf(qq.y, hi, fmaf(qq.x, lo, s[r]));
          }
      }
    }
    float p[kMaxRep];
#pragma unroll
    for (int r = 0; r < kMaxRep; ++r) {
      p[r] = 0.f;
      if (r >= rep) continue;
      float sr = s[r];
      sr += __shfl_xor_sync(0xFFFFFFFFu, sr, 1);
      sr += __shfl_xor_sync(0xFFFFFFFFu, sr, 2);
      if (!valid) sr = -INFINITY;
      float mx = sr;
      mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 16));
      const float m_new = fmaxf(acc.m[r], mx);  // finite: position j0 is valid
      const float corr = acc.m[r] == -INFINITY ? 0.f : exp2f(acc.m[r] - m_new);
      p[r] = valid ? exp2f(sr - m_new) : 0.f;
      float ps = quarter == 0 ? p[r] : 0.f;  // each position once
      ps += __shfl_xor_sync(0xFFFFFFFFu, ps, 4);
      ps += __shfl_xor_sync(0xFFFFFFFFu, ps, 8);
      ps += __shfl_xor_sync(0xFFFFFFFFu, ps, 16);
      acc.l[r] = fmaf(acc.l[r], corr, ps);
#pragma unroll
      for (int e = 0; e < E; ++e) acc.o[r][e] *= corr;
      acc.m[r] = m_new;
    }
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
      if (j0 + uint32_t(jj) >= n) break;  // warp-uniform
      float v[E];
      load_bf16<E>(vr + size_t(j0 + uint32_t(jj)) * HD + lane * E, v);
#pragma unroll
      for (int r = 0; r < kMaxRep; ++r)
        if (r < rep) {
          const float pj = __shfl_sync(0xFFFFFFFFu, p[r], 4 * jj);
#pragma unroll
          for (int e = 0; e < E; ++e) acc.o[r][e] = fmaf(pj, v[e], acc.o[r][e]);
        }
    }
  }
}

/**
 * Consumer warp w of W, all lanes: item it, the stream's next segment sg (kStreamKv, positions
 * [it.s0, min(it.s1, it.pos)); k as consume_segment's), scratch the attention_item_floats<HD, W>()
 * shared floats. Writes the item's partial for each query head and, when its chunk ends at pos,
 * the appended K/V rows. The caller has waited for the q|k|v rows it reads; ends with the
 * consumers' barrier (publish(..., synced) may follow). With `marks` (a trace at kMarkBuilt; nullptr:
 * none) writes clock64 at marks[0] when the item's input is built (q rotated, this step's k and v
 * rounded and appended: its loads from L2 are the item's build, as the GEMV's input build is
 * segment_gemv's), at marks[1..4] when every warp has folded its pages in (segment_gemv's sum, send
 * and exchange marks: an item has no partner) and at marks[5] when the partial is written; with `done`
 * (a trace, every warp) writes clock64 at done[w] when this warp is past its pages and position pos;
 * returns this warp's page wait (consume_segment's) when `marks` or `done`, else 0.
 *
 * (v2.13's one strided loop for q's and this step's k / v loads, with pos folded by the warp with
 * the fewest pages, measured 15 us a step slower than this form on an H100: NOTES.md "v2.13".)
 */
template <int HD, int W>
__device__ __forceinline__ long long attention_item(const PagePool& pool, const StreamSegment& sg, uint32_t& k, uint32_t w,
                                                    const AttnItem& it, float* scratch, long long* marks = nullptr,
                                                    long long* done = nullptr) {
  constexpr int HALF = HD / 2, E = AttnAcc<HD>::E;
  const int lane = int(threadIdx.x & 31), ct = int(w) * 32 + lane;
  float* q_s = scratch;
  float* kn_s = q_s + kMaxRep * HD;  // this step's k and v as bf16 values, then reinterpreted below
  uint16_t* kn = reinterpret_cast<uint16_t*>(kn_s);
  uint16_t* vn = kn + HD;
  float* acc_s = kn_s + 2 * HD;
  const float qscale = float(1.4426950408889634 / sqrt(double(HD)));
  const float2* cs = it.rope;
  for (int idx = ct; idx < it.rep * HALF; idx += 32 * W) {
    const int r = idx / HALF, i = idx % HALF;
    const float x1 = __ldcg(it.q + r * HD + i), x2 = __ldcg(it.q + r * HD + i + HALF);
    const float2 c = cs[i];
    q_s[r * HD + i] = (x1 * c.x - x2 * c.y) * qscale;
    q_s[r * HD + i + HALF] = (x2 * c.x + x1 * c.y) * qscale;
  }
  const bool has_pos = it.s1 == it.pos + 1;
  if (has_pos)
    for (int i = ct; i < HALF; i += 32 * W) {
      const float x1 = __ldcg(it.k_new + i), x2 = __ldcg(it.k_new + i + HALF);
      const float2 c = cs[i];
      kn[i] = bf16_rn(x1 * c.x - x2 * c.y);
      kn[i + HALF] = bf16_rn(x2 * c.x + x1 * c.y);
      vn[i] = bf16_rn(__ldcg(it.v_new + i));
      vn[i + HALF] = bf16_rn(__ldcg(it.v_new + i + HALF));
      it.k_slot[i] = kn[i], it.k_slot[i + HALF] = kn[i + HALF];
      it.v_slot[i] = vn[i], it.v_slot[i + HALF] = vn[i + HALF];
    }
  consumers_sync<W>();
  if (marks) marks[0] = clock64();
  AttnAcc<HD> acc;
#pragma unroll
  for (int r = 0; r < kMaxRep; ++r) {
    acc.m[r] = -INFINITY, acc.l[r] = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e) acc.o[r][e] = 0.f;
  }
  const long long waited = consume_segment(pool, sg, k, w, [&](uint32_t, uint32_t, uint32_t n, uint32_t, const unsigned char* page) {
    const auto* kr = reinterpret_cast<const uint16_t*>(page);
    attend_rows<HD>(kr, kr + size_t(kv_page_rows(sg.row_bytes)) * HD, n, q_s, it.rep, acc);
  }, done || marks);
  if (has_pos && w == W - 1) attend_rows<HD>(kn, vn, 1, q_s, it.rep, acc);  // position pos, by the last warp
  if (done && lane == 0) done[w] = clock64();
  // The warps' states into shared memory, then merged per (query head, element) into the partial.
  float* mine = acc_s + size_t(w) * kMaxRep * (HD + 2);
#pragma unroll
  for (int r = 0; r < kMaxRep; ++r) {
    if (r >= it.rep) break;
    if (lane == 0) mine[r * (HD + 2)] = acc.m[r], mine[r * (HD + 2) + 1] = acc.l[r];
#pragma unroll
    for (int e = 0; e < E; ++e) mine[r * (HD + 2) + 2 + lane * E + e] = acc.o[r][e];
  }
  consumers_sync<W>();
  if (marks) marks[1] = marks[2] = marks[3] = marks[4] = clock64();
  for (int idx = ct; idx < it.rep * HD; idx += 32 * W) {
    const int r = idx / HD, e = idx % HD;
    float M = -INFINITY;
    for (int ww = 0; ww < W; ++ww) M = fmaxf(M, acc_s[(ww * kMaxRep + r) * (HD + 2)]);
    float L = 0.f, O = 0.f;
    for (int ww = 0; ww < W; ++ww) {
      const float* sw = acc_s + (ww * kMaxRep + r) * (HD + 2);
      const float f = sw[0] == -INFINITY ? 0.f : exp2f(sw[0] - M);
      L = fmaf(sw[1], f, L);
      O = fmaf(sw[2 + e], f, O);
    }
    float* pp = it.part + size_t(r) * it.part_stride;
    pp[kPartialO + e] = O;
    if (e == 0) pp[0] = M, pp[1] = L;
  }
  consumers_sync<W>();
  if (marks) marks[5] = clock64();
  return waited;
}

}  // namespace nibble::megakernel::v2
