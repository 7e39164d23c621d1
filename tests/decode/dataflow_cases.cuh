// dataflow_cases.cuh: the dataflow megakernel's pieces (solutions/decode/megakernel: segment_gemv.cuh
// over page_stream.cuh, dataflow_sync.cuh) as test kernels and their checks, one copy for the CPU
// emulation (tests/emulation/test_segment_gemv_emulation.cpp, test_dataflow_sync_emulation.cpp) and
// the GPU (tests/decode/test_dataflow_gpu.cu). The includer sets up CUDA (the shim or the real one)
// first; launching and memory are the includer's.
//
//   Segments: 2-CTA clusters each stream their K half of their cluster's tiles of a list of matrices
//   through the page pool, build their input (x itself, RMSNorm, SwiGLU or the attention merge),
//   sum the halves through the partner's shared memory and write y; checked against an fp64 W x
//   (x computed in double from the same source) with the v1 GEMV's bound (|y - W x| <= 3e-5
//   sum |w x|), every row once.
//   Attention items: one item (KV head, chunk) per CTA, its cached K/V rows streamed through the page
//   pool; the chunks' partials merged (as combine_chunks) and checked with the v1 stage's checks
//   (megakernel_attention_case.h).
//   Sync: each CTA owns 16 rows of a vector per layer; each layer it waits for the previous layer's
//   publication of every cluster, counts the rows that do not hold it yet, writes its rows (later
//   CTAs later) and publishes; the counters are never reset between launches.
#pragma once

#include <cooperative_groups.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "attention_item.cuh"
#include "dataflow_inputs.cuh"
#include "dataflow_plan.h"
#include "dataflow_sync.cuh"
#include "decode/megakernel_attention_case.h"
#include "decode/megakernel_matrix.h"
#include "segment_gemv.cuh"

namespace nibble::test::dataflow_cases {

namespace v2 = megakernel::v2;
namespace df = megakernel::dataflow;
using test::AttnCase;

constexpr int kW = 3;                    // consumer warps
constexpr int kThreads = 32 * (1 + kW);  // warp 0 produces
constexpr uint32_t kPages = 6;           // a multiple of kW
constexpr uint32_t kLanes = 4;           // producer lanes: neither dividing kPages nor a multiple of kW
constexpr int kRowsPerCta = 16, kLayers = 3;

// ---- segments

/** What a segment's input x is built from (dataflow_inputs.cuh): x itself (K floats), RMSNorm of h
 *  (K floats) times a gain (K bf16), silu(gate) * up from gate|up (2 K floats, Interleave8), or the
 *  attention output merged from chunk partials (n_q, chunks, partial_floats(hd)), n_q hd = K. */
enum InputKind : int { kInputX = 0, kInputNorm, kInputSwiglu, kInputAttn };
constexpr float kEps = 1e-5f;

/** One segment's problem: its input's source and y (the CTA-specific part is in the stream). */
struct Job {
  const float* src;
  const uint16_t* gain;  // kInputNorm
  float* y;
  int rows, k;
  int kind, n_q, hd, chunks;  // kInputAttn: query heads, head dim, chunks
};

struct SegArgs {
  const v2::StreamSegment* segs;  // CTA c's are [first[c], first[c + 1]), one per job
  const int* first;
  const Job* jobs;
  int max_k;
  uint32_t max_tiles, max_pages;
  bool ordered = true;  // segment_gemv's page order (false: NIBBLE_DF_ORDER=0's atomics)
  int attn_weights = 0;  // the attention merge's weights (n_q x chunks; SegmentCase::attn_weights)
};

/** The kernel body: blockIdx.z is the CTA, clusters of 2 along z. */
__device__ inline void run_segments(SegArgs a) {
  NIBBLE_DYNAMIC_SMEM(smem, 16);
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const v2::PagePool pool = v2::page_pool_init(smem, kPages, kW);
  unsigned char* xq = smem + v2::page_pool_bytes(kPages);
  float* xs = reinterpret_cast<float*>(xq + megakernel::xquant_bytes(a.max_k));
  float* red = xs + a.max_k;
  const v2::ClusterSum cs =
      v2::cluster_sum_init(reinterpret_cast<unsigned char*>(xs) + v2::input_scratch_bytes(a.max_k, kW, a.attn_weights),
                           a.max_tiles, a.max_pages);
  cluster.sync();  // both CTAs' mbarriers initialised before either sends
  const int cta = int(blockIdx.z), warp = int(threadIdx.x) / 32;
  const v2::StreamSegment* mine = a.segs + a.first[cta];
  const int n = a.first[cta + 1] - a.first[cta];
  if (warp == 0) {
    v2::produce_pages(pool, mine, n, kLanes);
  } else {
    uint32_t k = 0;
    for (int s = 0; s < n; ++s) {
      const Job j = a.jobs[s];
      const int g0 = mine[s].g0, g1 = mine[s].g1;
      const uint32_t w = uint32_t(warp - 1);
      if (j.kind == kInputNorm) {
        v2::norm_input<kW>(j.src, j.k, j.gain, kEps, g0, g1, xs, red, xq, w);
      } else if (j.kind == kInputSwiglu) {
        v2::swiglu_input<kW>(j.src, j.k, g0, g1, xs, xq, w);
      } else if (j.kind == kInputAttn) {
        if (j.hd == 64)
          v2::attn_input<64, kW>(j.src, j.chunks, j.n_q, g0, g1, xs, red + kW, xq, w);
        else
          v2::attn_input<128, kW>(j.src, j.chunks, j.n_q, g0, g1, xs, red + kW, xq, w);
      } else {
        megakernel::build_x_limbs_warps(int(w), kW, j.src, j.k, xq, nullptr, 1.f, g0, g1);
        v2::consumers_sync<kW>();
      }
      v2::segment_gemv<kW>(pool, mine[s], k, uint32_t(warp - 1), xq, cs, uint32_t(s), cluster.block_rank(), j.y, j.rows,
                           nullptr, a.ordered);
    }
  }
  cluster.sync();  // no CTA leaves while its partner may still store into it
}

/** A matrix's input as the case builds it: its kind and, for kInputAttn, the partials' shape. */
struct InputSpec {
  int kind = kInputX, n_q = 0, hd = 0, chunks = 0;
};

/** A matrix's input: the random source (and gain) the kernel reads, and x computed from them in
 *  double, the reference's input. */
struct Input {
  InputSpec spec;
  std::vector<float> src;
  std::vector<uint16_t> gain;
  std::vector<double> x;
};

inline double bf16_double(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline Input make_input(const InputSpec& spec, int k, std::mt19937& rng) {
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  Input in;
  in.spec = spec;
  in.x.assign(size_t(k), 0.0);
  if (spec.kind == kInputNorm) {
    in.src.resize(size_t(k));
    for (float& v : in.src) v = 3.f * uni(rng);
    in.gain.resize(size_t(k));
    double ss = 0;
    for (float v : in.src) ss += double(v) * v;
    const double mul = 1.0 / std::sqrt(ss / k + double(kEps));
    for (int i = 0; i < k; ++i) {
      in.gain[size_t(i)] = f32_to_bf16(1.f + 0.5f * uni(rng));
      in.x[size_t(i)] = double(in.src[size_t(i)]) * mul * bf16_double(in.gain[size_t(i)]);
    }
  } else if (spec.kind == kInputSwiglu) {
    in.src.resize(size_t(2) * k);
    for (float& v : in.src) v = 3.f * uni(rng);
    for (int f = 0; f < k; ++f) {  // Interleave8: tile f / 8 holds gate rows then up rows
      const double g = in.src[size_t(16 * (f / 8) + f % 8)], u = in.src[size_t(16 * (f / 8) + 8 + f % 8)];
      in.x[size_t(f)] = g / (1.0 + std::exp(-g)) * u;
    }
  } else if (spec.kind == kInputAttn) {
    const int hd = spec.hd, C = spec.chunks;
    const int pf = v2::partial_floats(hd);
    in.src.resize(size_t(spec.n_q) * C * pf);
    for (int j = 0; j < spec.n_q; ++j)
      for (int c = 0; c < C; ++c) {
        float* pc = in.src.data() + (size_t(j) * C + c) * pf;
        pc[0] = 2.f * uni(rng), pc[1] = 1.5f + uni(rng);
        for (int e = 0; e < hd; ++e) pc[v2::kPartialO + e] = uni(rng);
      }
    for (int j = 0; j < spec.n_q; ++j)
      for (int e = 0; e < hd; ++e) {
        double M = -INFINITY, L = 0, O = 0;
        for (int c = 0; c < C; ++c) M = std::max(M, double(in.src[(size_t(j) * C + c) * pf]));
        for (int c = 0; c < C; ++c) {
          const float* pc = in.src.data() + (size_t(j) * C + c) * pf;
          L += double(pc[1]) * std::exp2(double(pc[0]) - M);
          O += double(pc[v2::kPartialO + e]) * std::exp2(double(pc[0]) - M);
        }
        in.x[size_t(j) * hd + e] = O / L;
      }
  } else {
    in.src.resize(size_t(k));
    for (float& v : in.src) v = uni(rng);
    for (int i = 0; i < k; ++i) in.x[size_t(i)] = in.src[size_t(i)];
  }
  return in;
}

/** The host side of a segments case: the matrices streamed in `order` by `clusters` clusters. */
struct SegmentCase {
  std::vector<Input> inputs;              // per matrix
  std::vector<v2::StreamSegment> segs;    // w: the weights' addresses the caller gave
  std::vector<int> first;
  int max_k = 0;
  uint32_t max_tiles = 0, max_pages = 0;
  int attn_weights = 0;  // the attention merge's weights: the most n_q x chunks of an input
  size_t smem = 0;
};

/** `weights(m)`: where matrix m's units are for the kernel (host memory for the emulation, device
 *  memory for the GPU); specs: each matrix's input (none: x itself). */
inline SegmentCase make_segment_case(const std::vector<Matrix>& mats, const std::vector<int>& order, int clusters,
                                     const std::function<const uint4*(int)>& weights, std::vector<InputSpec> specs = {}) {
  SegmentCase c;
  std::mt19937 rng(11);
  specs.resize(mats.size());
  for (size_t m = 0; m < mats.size(); ++m) {
    c.inputs.push_back(make_input(specs[m], mats[m].k, rng));
    if (specs[m].kind == kInputAttn) c.attn_weights = std::max(c.attn_weights, specs[m].n_q * specs[m].chunks);
  }
  for (int cta = 0; cta < 2 * clusters; ++cta) {
    c.first.push_back(int(c.segs.size()));
    for (int mi : order) {
      const Matrix& M = mats[size_t(mi)];
      int t0 = 0, t1 = 0;
      df::cluster_tiles(M.tiles, clusters, cta / 2, &t0, &t1);
      v2::StreamSegment s;
      s.w = weights(mi);
      s.tile0 = uint32_t(t0), s.tile1 = uint32_t(t1);
      s.g0 = uint16_t(M.groups * (cta % 2) / 2), s.g1 = uint16_t(M.groups * (cta % 2 + 1) / 2), s.groups = uint16_t(M.groups);
      c.segs.push_back(s);
      c.max_tiles = std::max(c.max_tiles, uint32_t(t1 - t0));
      c.max_pages = std::max(c.max_pages, v2::segment_pages(s));
      c.max_k = std::max(c.max_k, M.k);
    }
  }
  c.first.push_back(int(c.segs.size()));
  c.smem = v2::page_pool_bytes(kPages) + megakernel::xquant_bytes(c.max_k) + v2::input_scratch_bytes(c.max_k, kW, c.attn_weights) +
           v2::cluster_sum_bytes(c.max_tiles, c.max_pages);
  return c;
}

/** The job of a segment of matrix M with input `in` (its source and gain where the kernel finds
 *  them) writing y. */
inline Job make_job(const Matrix& M, const Input& in, const float* src, const uint16_t* gain, float* y) {
  return Job{src, gain, y, M.rows, M.k, in.spec.kind, in.spec.n_q, in.spec.hd, in.spec.chunks};
}

/** y of a segment of matrix M over x: the worst |y - W x| / (3e-5 sum |w x|) over its rows; rows
 *  never written (still NaN) or written beyond M.rows (y holds a guard tile more) are counted. */
inline double check_segment(const Matrix& M, const std::vector<double>& x, const std::vector<float>& y, int* unwritten) {
  double worst = 0.0;
  for (int r = 0; r < int(y.size()); ++r) {
    if (r >= M.rows || std::isnan(y[size_t(r)])) {
      *unwritten += (r >= M.rows) != std::isnan(y[size_t(r)]);
      continue;
    }
    double ref = 0.0, mag = 0.0;
    for (int kk = 0; kk < M.k; ++kk) {
      ref += M.w(r, kk) * x[size_t(kk)];
      mag += std::fabs(M.w(r, kk) * x[size_t(kk)]);
    }
    worst = std::max(worst, std::fabs(y[size_t(r)] - ref) / (3e-5 * mag));
  }
  return worst;
}

/** A y buffer for matrix M: its tiles and a guard tile, NaN. */
inline std::vector<float> nan_output(const Matrix& M) {
  return std::vector<float>(size_t(M.tiles) * 16 + 16, std::numeric_limits<float>::quiet_NaN());
}

// ---- attention items

struct ItemArgs {
  const v2::StreamSegment* segs;  // one per CTA (blockIdx.x)
  const v2::AttnItem* items;      // one per CTA
};

template <int HD>
constexpr size_t item_smem() {
  return v2::page_pool_bytes(kPages) + size_t(v2::attention_item_floats<HD, kW>()) * 4;
}

/** The kernel body: CTA blockIdx.x runs item blockIdx.x. */
template <int HD>
__device__ inline void attention_items(ItemArgs a) {
  NIBBLE_DYNAMIC_SMEM(smem, 16);
  const v2::PagePool pool = v2::page_pool_init(smem, kPages, kW);
  float* scratch = reinterpret_cast<float*>(smem + v2::page_pool_bytes(kPages));
  __syncthreads();
  const int cta = int(blockIdx.x), warp = int(threadIdx.x) / 32;
  if (warp == 0) {
    v2::produce_pages(pool, a.segs + cta, 1, kLanes);
    return;
  }
  uint32_t k = 0;
  v2::attention_item<HD, kW>(pool, a.segs[cta], k, uint32_t(warp - 1), a.items[cta], scratch);
}

/** Case t's items, `chunks` per KV head (chunk c: positions (pos + 1) c / chunks to (pos + 1) (c + 1) /
 *  chunks), over the caches kc / vc (n_kv, max_seq, hd), the q|k|v vector, the RoPE table (an item reads
 *  its row of pos) and the partials part (n_q, chunks, partial_floats(hd)) where the kernel finds them
 *  (host or device memory). */
inline void make_item_case(const AttnCase& t, int chunks, uint16_t* kc, uint16_t* vc, const float* qkv, const float2* rope,
                           float* part, std::vector<v2::StreamSegment>* segs, std::vector<v2::AttnItem>* items) {
  const int hd = t.hd, rep = t.n_q / t.n_kv, n = t.pos + 1;
  for (int h = 0; h < t.n_kv; ++h)
    for (int c = 0; c < chunks; ++c) {
      const int s0 = n * c / chunks, s1 = n * (c + 1) / chunks;
      v2::StreamSegment s;
      s.kind = v2::kStreamKv;
      s.w = reinterpret_cast<const uint4*>(kc + size_t(h) * t.max_seq * hd);
      s.v = reinterpret_cast<const uint4*>(vc + size_t(h) * t.max_seq * hd);
      s.tile0 = uint32_t(s0), s.tile1 = uint32_t(std::max(s0, std::min(s1, t.pos)));  // the cached rows only
      s.row_bytes = uint32_t(hd) * 2;
      segs->push_back(s);
      v2::AttnItem it;
      it.q = qkv + size_t(h) * rep * hd;
      it.k_new = qkv + size_t(t.n_q) * hd + size_t(h) * hd;
      it.v_new = qkv + size_t(t.n_q + t.n_kv) * hd + size_t(h) * hd;
      it.rope = rope + size_t(t.pos) * (hd / 2);  // the row of pos (the kernel keeps it in shared memory)
      it.k_slot = kc + (size_t(h) * t.max_seq + t.pos) * hd;
      it.v_slot = vc + (size_t(h) * t.max_seq + t.pos) * hd;
      it.part = part + (size_t(h) * rep * chunks + c) * v2::partial_floats(hd);
      it.part_stride = chunks * v2::partial_floats(hd);
      it.rep = rep, it.pos = t.pos, it.s0 = s0, it.s1 = s1;
      items->push_back(it);
    }
}

/** The attention output (n_q, hd) from the partials (n_q, chunks, partial_floats(hd)), merged as
 *  attn_input does, in double (an empty chunk, m = -inf, adds nothing). */
inline std::vector<float> merge_chunks(const std::vector<float>& part, int n_q, int chunks, int hd) {
  const int pf = v2::partial_floats(hd);
  std::vector<float> out(size_t(n_q) * hd);
  for (int j = 0; j < n_q; ++j)
    for (int e = 0; e < hd; ++e) {
      double M = -INFINITY, L = 0, O = 0;
      for (int c = 0; c < chunks; ++c) M = std::max(M, double(part[(size_t(j) * chunks + c) * pf]));
      for (int c = 0; c < chunks; ++c) {
        const float* pc = part.data() + (size_t(j) * chunks + c) * pf;
        if (pc[0] == -INFINITY) continue;
        L += double(pc[1]) * std::exp2(double(pc[0]) - M);
        O += double(pc[v2::kPartialO + e]) * std::exp2(double(pc[0]) - M);
      }
      out[size_t(j) * hd + e] = float(O / L);
    }
  return out;
}

// ---- publish / wait

__host__ __device__ inline float sync_value(unsigned seq, int row) { return float(seq) * 1000.f + float(row); }

struct SyncArgs {
  float* v;           // (2, rows): the vector of each layer parity
  unsigned* counter;  // (clusters): publications x 2
  unsigned* stale;    // per CTA: rows read before they held the previous layer's value
  unsigned step;
  int shortfall;      // 0; 1 waits for one publisher fewer (the check's own test)
};

/** The kernel body: kLayers layers of decode step a.step; blockIdx.z is the CTA, clusters of 2. */
__device__ inline void sync_layers(SyncArgs a) {
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int cta = int(blockIdx.z), clusters = int(gridDim.z) / 2, rows = int(gridDim.z) * kRowsPerCta;
  const int warp = int(threadIdx.x) / 32;
  if (warp > 0) {
    const uint32_t w = uint32_t(warp - 1);
    for (int l = 0; l < kLayers; ++l) {
      const unsigned seq = v2::publication(a.step, kLayers, unsigned(l));
      if (seq > 1) {  // the previous publication: layer l - 1, or the last layer of the previous step
        v2::wait_published<kW>(a.counter, 0, clusters, 2 * (seq - 1) - unsigned(a.shortfall), w);
        const volatile float* prev = a.v + size_t((seq - 1) & 1) * rows;
        for (int r = int(w) * 32 + int(threadIdx.x & 31); r < rows; r += 32 * kW)
          if (prev[r] != sync_value(seq - 1, r)) atomicAdd(&a.stale[cta], 1u);
      }
      // Later CTAs write later (each poll yields in the emulation; takes time on the GPU).
      for (int i = 0; i < 30 * cta; ++i) (void)nibble::sol::ld_acquire_gpu(a.counter);
      float* cur = a.v + size_t(seq & 1) * rows;
      for (int r = int(w) * 32 + int(threadIdx.x & 31); r < kRowsPerCta; r += 32 * kW)
        cur[cta * kRowsPerCta + r] = sync_value(seq, cta * kRowsPerCta + r);
      v2::publish<kW>(a.counter + cta / 2, w);
    }
  }
  cluster.sync();
}

}  // namespace nibble::test::dataflow_cases
