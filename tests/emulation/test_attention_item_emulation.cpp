// test_attention_item_emulation.cpp: the dataflow megakernel's attention item (solutions/decode/
// megakernel/attention_item.cuh) run from its source on the CPU: one item (KV head, sequence chunk)
// per CTA, its cached K/V rows streamed by the producer through the page pool (kStreamKv), the
// partials merged on the host over the chunks (as combine_chunks does) and checked with the v1
// attention stage's checks (tests/decode/megakernel_attention_case.h: the appended K/V rows, no
// other cache row touched, the output against an fp64 attention within 1e-5). hd 64 and 128, 1 to 4
// query heads per KV head, positions around a page's and a chunk's edge, 1 to 3 chunks (an empty
// chunk when there are more chunks than positions). (Checked: scoring the step's own position
// twice, or leaving it out, fails.)
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <cuda_runtime.h>  // first: the shim headers set up the emulation

#include "attention_item.cuh"
#include "decode/megakernel_attention_case.h"

namespace nibble {
namespace {

namespace v2 = megakernel::v2;
using test::AttnCase;

constexpr int kW = 3, kThreads = 32 * (1 + kW);
constexpr uint32_t kPages = 6;

struct Args {
  const v2::StreamSegment* segs;  // one per CTA
  const v2::AttnItem* items;      // one per CTA
};

template <int HD>
__device__ void item_body(Args a) {
  NIBBLE_DYNAMIC_SMEM(smem, 16);
  const v2::PagePool pool = v2::page_pool_init(smem, kPages, kW);
  float* scratch = reinterpret_cast<float*>(smem + v2::page_pool_bytes(kPages));
  __syncthreads();
  const int cta = int(blockIdx.x), warp = int(threadIdx.x) / 32;
  if (warp == 0) {
    if (threadIdx.x == 0) v2::produce_pages(pool, a.segs + cta, 1);
    return;
  }
  uint32_t k = 0;
  v2::attention_item<HD, kW>(pool, a.segs[cta], k, uint32_t(warp - 1), a.items[cta], scratch);
}

template <int HD>
void run_case(const AttnCase& t, int chunks) {
  emu::unreg_all();
  test::AttnInputs in = test::attention_inputs(t);
  std::vector<uint16_t> kc = in.kc, vc = in.vc;
  emu::reg("K", kc.data(), kc.size() * 2);
  emu::reg("V", vc.data(), vc.size() * 2);
  emu::reg("qkv", in.qkv.data(), in.qkv.size() * 4);
  const int rep = t.n_q / t.n_kv, n = t.pos + 1;
  std::vector<float> part(size_t(t.n_q) * chunks * (HD + 2), std::nanf(""));
  std::vector<v2::StreamSegment> segs;
  std::vector<v2::AttnItem> items;
  for (int h = 0; h < t.n_kv; ++h)
    for (int c = 0; c < chunks; ++c) {
      const int s0 = n * c / chunks, s1 = n * (c + 1) / chunks;
      v2::StreamSegment s;
      s.kind = v2::kStreamKv;
      s.w = reinterpret_cast<const uint4*>(kc.data() + size_t(h) * t.max_seq * HD);
      s.v = reinterpret_cast<const uint4*>(vc.data() + size_t(h) * t.max_seq * HD);
      s.tile0 = uint32_t(s0), s.tile1 = uint32_t(std::min(s1, t.pos));
      if (s.tile1 < s.tile0) s.tile1 = s.tile0;
      s.row_bytes = HD * 2;
      segs.push_back(s);
      v2::AttnItem it;
      it.q = in.qkv.data() + size_t(h) * rep * HD;
      it.k_new = in.qkv.data() + size_t(t.n_q) * HD + size_t(h) * HD;
      it.v_new = in.qkv.data() + size_t(t.n_q + t.n_kv) * HD + size_t(h) * HD;
      it.rope = in.rope.data();
      it.k_slot = kc.data() + (size_t(h) * t.max_seq + t.pos) * HD;
      it.v_slot = vc.data() + (size_t(h) * t.max_seq + t.pos) * HD;
      it.part = part.data() + (size_t(h) * rep * chunks + c) * (HD + 2);
      it.part_stride = chunks * (HD + 2);
      it.rep = rep, it.pos = t.pos, it.s0 = s0, it.s1 = s1;
      items.push_back(it);
    }
  const size_t smem = v2::page_pool_bytes(kPages) + size_t(v2::attention_item_floats<HD, kW>()) * 4;
  emu::launch_cooperative(+[](Args a) { item_body<HD>(a); }, dim3(unsigned(t.n_kv * chunks)), dim3(kThreads), smem, 1u,
                          Args{segs.data(), items.data()});
  // The chunks merged as combine_chunks does, in double.
  std::vector<float> out(size_t(t.n_q) * HD);
  for (int j = 0; j < t.n_q; ++j)
    for (int e = 0; e < HD; ++e) {
      double M = -INFINITY, L = 0, O = 0;
      for (int c = 0; c < chunks; ++c) M = std::max(M, double(part[(size_t(j) * chunks + c) * (HD + 2)]));
      for (int c = 0; c < chunks; ++c) {
        const float* pc = part.data() + (size_t(j) * chunks + c) * (HD + 2);
        if (pc[0] == -INFINITY) continue;
        L += double(pc[1]) * std::exp2(double(pc[0]) - M);
        O += double(pc[2 + e]) * std::exp2(double(pc[0]) - M);
      }
      out[size_t(j) * HD + e] = float(O / L);
    }
  test::check_attention(t, in, kc, vc, out, std::vector<unsigned>(size_t(t.n_kv), 0u));
}

TEST(AttentionItemEmulation, ChunkPartialsMergeToTheFp64Attention) {
  for (int pos : {0, 7, 8, 16, 17, 40})
    for (int chunks : {1, 3}) {
      run_case<128>(AttnCase{128, 4, 2, 64, pos, 0}, chunks);
      run_case<128>(AttnCase{128, 8, 2, 64, pos, 0}, chunks);
      run_case<64>(AttnCase{64, 3, 3, 64, pos, 0}, chunks);
      run_case<64>(AttnCase{64, 6, 2, 64, pos, 0}, chunks);
      if (HasFailure()) {
        ADD_FAILURE() << "pos " << pos << ", " << chunks << " chunks";
        return;
      }
    }
}

}  // namespace
}  // namespace nibble
