// test_attention_item_emulation.cpp: the dataflow megakernel's attention item (solutions/decode/
// megakernel/attention_item.cuh) run from its source on the CPU: one item (KV head, sequence chunk)
// per CTA, its cached K/V rows streamed by the producer through the page pool (kStreamKv), the
// partials merged on the host over the chunks (as combine_chunks does) and checked with the v1
// attention stage's checks (tests/decode/megakernel_attention_case.h: the appended K/V rows, no
// other cache row touched, the output against an fp64 attention within 1e-5). hd 64 and 128, 1 to 4
// query heads per KV head, positions around a page's and a chunk's edge, 1 to 3 chunks (an empty
// chunk when there are more chunks than positions). The kernel and the case are tests/decode/
// dataflow_cases.cuh, shared with the GPU test. (Checked: scoring the step's own position
// twice, or leaving it out, fails.)
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <cuda_runtime.h>  // first: the shim headers set up the emulation

#include "decode/dataflow_cases.cuh"

namespace nibble {
namespace {

using namespace test::dataflow_cases;

template <int HD>
void run_case(const AttnCase& t, int chunks) {
  emu::unreg_all();
  test::AttnInputs in = test::attention_inputs(t);
  std::vector<uint16_t> kc = in.kc, vc = in.vc;
  emu::reg("K", kc.data(), kc.size() * 2);
  emu::reg("V", vc.data(), vc.size() * 2);
  emu::reg("qkv", in.qkv.data(), in.qkv.size() * 4);
  std::vector<float> part(size_t(t.n_q) * chunks * megakernel::v2::partial_floats(HD), std::nanf(""));
  std::vector<megakernel::v2::StreamSegment> segs;
  std::vector<megakernel::v2::AttnItem> items;
  make_item_case(t, chunks, kc.data(), vc.data(), in.qkv.data(), in.rope.data(), part.data(), &segs, &items);
  emu::launch_cooperative(+[](ItemArgs a) { attention_items<HD>(a); }, dim3(unsigned(t.n_kv * chunks)), dim3(kThreads),
                          item_smem<HD>(), 1u, ItemArgs{segs.data(), items.data()});
  test::check_attention(t, in, kc, vc, merge_chunks(part, t.n_q, chunks, HD), std::vector<unsigned>(size_t(t.n_kv), 0u));
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
