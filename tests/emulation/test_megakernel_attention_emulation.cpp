// test_megakernel_attention_emulation.cpp: the megakernel's attention stage (attention_blocks_body:
// solutions/decode/megakernel/stage_blocks.cuh over attention.cuh, the decode kernel's own code: RoPE,
// the K/V append, the sub-chunks' bulk copies, scores and weighted V on mma.sync, the online
// softmax, the last block's combine) run from its source on the CPU (emu_core.h, emu_async.h), with
// the GPU stage test's cases and checks (tests/decode/megakernel_attention_case.h: appended K/V,
// untouched rows, counters reset, fp64 attention): hd 64 and 128, 1-4 query heads per KV head,
// positions on either side of a sub-chunk edge, 1-5 blocks (one block per chunk, several chunks per
// KV head, the combine by the last block). The blocks run one after another here: the combine's
// election by count needs no block to wait for another.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "stage_blocks.cuh"  // first: the shim headers set up the emulation
#include "decode/megakernel_attention_case.h"

namespace nibble {
namespace {

namespace mk = megakernel;
using test::AttnCase;

template <int HD>
void run(const AttnCase& t) {
  const test::AttnInputs in = test::attention_inputs(t);
  emu::unreg_all();
  std::vector<uint16_t> kc(in.kc), vc(in.vc);
  std::vector<float> qkv(in.qkv);
  std::vector<float2> rope(in.rope);
  const int max_chunks = mk::attn_max_chunks(t.blocks, t.n_kv);
  std::vector<float> part(size_t(t.n_q) * max_chunks * (HD + 2), 0.0f);
  std::vector<unsigned> cnt(size_t(t.n_kv), 0u);
  std::vector<float> out(size_t(t.n_q) * HD, __builtin_nanf(""));
  emu::reg("k_cache", kc.data(), kc.size() * 2);
  emu::reg("v_cache", vc.data(), vc.size() * 2);
  emu::reg("qkv", qkv.data(), qkv.size() * 4);
  emu::reg("rope", rope.data(), rope.size() * 8);
  emu::reg("part", part.data(), part.size() * 4);
  emu::reg("count", cnt.data(), cnt.size() * 4);
  emu::launch(
      +[](const float* q, const float2* r, uint16_t* k, uint16_t* v, int n_q, int n_kv, int max_seq, int pos, float* p,
          int mc, unsigned* c, float* o) {
        mk::attention_blocks_body<HD>(emu::smem_base(), q, r, k, v, n_q, n_kv, max_seq, pos, p, mc, c, o);
      },
      dim3(unsigned(t.blocks)), dim3(mk::kThreads), mk::attention_blocks_smem<HD>(), static_cast<const float*>(qkv.data()),
      static_cast<const float2*>(rope.data()), kc.data(), vc.data(), t.n_q, t.n_kv, t.max_seq, t.pos, part.data(),
      max_chunks, cnt.data(), out.data());
  test::check_attention(t, in, kc, vc, out, cnt);
}

class MegakernelAttentionEmulation : public ::testing::TestWithParam<AttnCase> {};

TEST_P(MegakernelAttentionEmulation, MatchesFp64) {
  const AttnCase t = GetParam();
  if (t.hd == 64)
    run<64>(t);
  else
    run<128>(t);
}

INSTANTIATE_TEST_SUITE_P(Cases, MegakernelAttentionEmulation,
                         ::testing::Values(AttnCase{64, 2, 2, 320, 0, 1}, AttnCase{64, 4, 2, 320, 17, 2},
                                           AttnCase{128, 2, 1, 320, 143, 1}, AttnCase{128, 8, 2, 320, 144, 4},
                                           AttnCase{128, 6, 2, 320, 200, 5}, AttnCase{64, 6, 2, 320, 288, 3}),
                         [](const ::testing::TestParamInfo<AttnCase>& i) {
                           std::string s = test::attention_case_name(i.param);
                           for (char& c : s)
                             if (c == ' ') c = '_';
                           return s;
                         });

}  // namespace
}  // namespace nibble
