// test_megakernel_abi.cpp: libnibble_megakernel.so through the C ABI, the configs it declines.
//
// build_model checks the config before any CUDA call, so this runs on any machine (label cpu):
// what the kernels cannot run (group other than 128, head dims other than 64 / 128, more than 4
// query heads per KV head, inputs too long for shared memory) is NOT_SUPPORTED with a message that
// names the field; a config that breaks the task's own rules (n_q not a multiple of n_kv, a
// non-positive size), a NULL model and another task are answered without touching the GPU.
// Also the GEMV's work split (gemv_plan, host code the device only reads), against cases by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "harness/solution_library.h"
#include "megakernel.h"
#include "nibble/nibble.h"

namespace {

std::string solution_path() {
  const char* bin = std::getenv("NIBBLE_BINARY_DIR");
  return std::string(bin && *bin ? bin : ".") + "/lib/libnibble_megakernel.so";
}

nibble_decode_config tiny() { return {2, 256, 512, 4, 2, 64, 1000, 128, 1, 256, 1e-5, 500000.0}; }

/** build_model on a model with no tensors: the config check must answer first. */
nibble_status build(const nibble::SolutionLibrary& lib, const nibble_decode_config& cfg, std::string* msg,
                    const char* task = "megakernel-int4-weight-decode") {
  nibble_decode_model m{};
  m.struct_size = sizeof(m);
  m.task = task;
  m.config_name = "test";
  m.cfg = cfg;
  m.tensors = nullptr;
  m.num_tensors = 0;
  nibble_error err{};
  void* handle = reinterpret_cast<void*>(1);
  const nibble_status s = lib.build_model(&m, nullptr, &handle, &err);
  *msg = err.message;
  EXPECT_EQ(handle, nullptr) << "a failed build_model must leave the handle NULL";
  return s;
}

TEST(MegakernelAbi, NameAndDeclinedConfigs) {
  const nibble::SolutionLibrary lib(solution_path());
  EXPECT_EQ(lib.name(), "megakernel");
  std::string msg;

  nibble_decode_config c = tiny();
  c.group = 64;
  EXPECT_EQ(build(lib, c, &msg), NIBBLE_ERR_NOT_SUPPORTED);
  EXPECT_NE(msg.find("group"), std::string::npos) << msg;

  c = tiny();
  c.hd = 96;
  EXPECT_EQ(build(lib, c, &msg), NIBBLE_ERR_NOT_SUPPORTED);
  EXPECT_NE(msg.find("hd"), std::string::npos) << msg;

  c = tiny();
  c.n_q = 10;  // 5 query heads per KV head
  EXPECT_EQ(build(lib, c, &msg), NIBBLE_ERR_NOT_SUPPORTED);
  EXPECT_NE(msg.find("query heads per KV head"), std::string::npos) << msg;

  c = tiny();
  c.ffn = 32768;  // 256 KB of input vector and fragments: more than shared memory
  EXPECT_EQ(build(lib, c, &msg), NIBBLE_ERR_NOT_SUPPORTED);
  EXPECT_NE(msg.find("shared memory"), std::string::npos) << msg;

  c = tiny();
  c.n_q = 3;  // 3 x 64 = 192 attention outputs: o-proj's input is not whole groups of 128
  c.n_kv = 1;
  EXPECT_EQ(build(lib, c, &msg), NIBBLE_ERR_NOT_SUPPORTED);
  EXPECT_NE(msg.find("n_q * hd"), std::string::npos) << msg;

  c = tiny();
  c.n_q = 3;  // not a multiple of n_kv = 2: not a GQA config at all
  EXPECT_EQ(build(lib, c, &msg), NIBBLE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("n_q"), std::string::npos) << msg;

  c = tiny();
  c.d = 0;
  EXPECT_EQ(build(lib, c, &msg), NIBBLE_ERR_INVALID_ARGUMENT);

  EXPECT_EQ(build(lib, tiny(), &msg, "gemm-w4a16-nvfp4"), NIBBLE_ERR_NOT_SUPPORTED);
  EXPECT_NE(msg.find("gemm-w4a16-nvfp4"), std::string::npos) << msg;

  nibble_error err{};
  void* handle = nullptr;
  EXPECT_EQ(lib.build_model(nullptr, nullptr, &handle, &err), NIBBLE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lib.teardown(nullptr, nullptr, &err), NIBBLE_OK);  // teardown of nothing is a no-op
}

namespace mk = nibble::megakernel;

/** chunk: PackedMatrix::chunk (0 tile-major, 1 group-major, else groups per chunk). */
mk::PackedMatrix shape(int tiles, int groups, int chunk) {
  mk::PackedMatrix m;
  m.tiles = tiles;
  m.groups = groups;
  m.rows = tiles * 16;
  m.chunk = chunk;
  return m;
}

void expect_plan(const mk::GemvPlan& p, uint32_t u0, uint32_t u1, uint32_t tile0, int j0, int j_last,
                 const std::string& what) {
  EXPECT_EQ(p.u0, u0) << what;
  EXPECT_EQ(p.u1, u1) << what;
  EXPECT_EQ(p.tile0, tile0) << what;
  EXPECT_EQ(p.j0, j0) << what;
  EXPECT_EQ(p.j_last, j_last) << what;
}

// 3 tiles x 2 groups = 6 units over 4 warps: [0,1) [1,3) [3,4) [4,6) (6 gw / 4, floored).
TEST(MegakernelPlan, TileMajorByHand) {
  const mk::PackedMatrix m = shape(3, 2, 0);  // u = tile * 2 + group
  expect_plan(mk::gemv_plan(m, 0, 4), 0, 1, 0, 0, 0, "warp 0");
  expect_plan(mk::gemv_plan(m, 1, 4), 1, 3, 0, 1, 0, "warp 1: tile 0 group 1 .. tile 1 group 0");
  expect_plan(mk::gemv_plan(m, 2, 4), 3, 4, 1, 1, 1, "warp 2");
  expect_plan(mk::gemv_plan(m, 3, 4), 4, 6, 2, 0, 1, "warp 3");
}

TEST(MegakernelPlan, GroupMajorByHand) {
  const mk::PackedMatrix m = shape(3, 2, 1);  // u = group * 3 + tile
  expect_plan(mk::gemv_plan(m, 1, 4), 1, 3, 1, 0, 0, "warp 1: tiles 1, 2 of group 0");
  expect_plan(mk::gemv_plan(m, 2, 4), 3, 4, 0, 1, 1, "warp 2: tile 0 of group 1");
  expect_plan(mk::gemv_plan(m, 3, 4), 4, 6, 1, 1, 1, "warp 3");
}

// 2 units over 4 warps: warps 0 and 2 have none; j_last still names the group of unit u1 - 1 (the
// block split reads it from a block's last warp, whose own range may be empty).
TEST(MegakernelPlan, EmptyRanges) {
  const mk::PackedMatrix m = shape(1, 2, 1);
  expect_plan(mk::gemv_plan(m, 0, 4), 0, 0, 0, 0, 0, "warp 0: empty, u1 = 0");
  expect_plan(mk::gemv_plan(m, 1, 4), 0, 1, 0, 0, 0, "warp 1");
  expect_plan(mk::gemv_plan(m, 2, 4), 1, 1, 0, 1, 0, "warp 2: empty, unit 0 before it is group 0");
  expect_plan(mk::gemv_plan(m, 3, 4), 1, 2, 0, 1, 1, "warp 3");
}

// 2 tiles x 4 groups in chunks of 2: u 0..3 = (t0 g0) (t0 g1) (t1 g0) (t1 g1), u 4..7 the same for
// g2, g3. 3 warps: [0,2) [2,5) [5,8).
TEST(MegakernelPlan, ChunksByHand) {
  const mk::PackedMatrix m = shape(2, 4, 2);
  expect_plan(mk::gemv_plan(m, 0, 3), 0, 2, 0, 0, 1, "warp 0: tile 0, groups 0 1");
  expect_plan(mk::gemv_plan(m, 1, 3), 2, 5, 1, 0, 2, "warp 1: tile 1 groups 0 1, then tile 0 group 2");
  expect_plan(mk::gemv_plan(m, 2, 3), 5, 8, 0, 3, 3, "warp 2: tile 0 group 3, tile 1 groups 2 3");
  EXPECT_TRUE(mk::valid_chunk(2, 4));
  EXPECT_TRUE(mk::valid_chunk(24, 24));  // tile-major
  EXPECT_TRUE(mk::valid_chunk(8, 24));
  EXPECT_FALSE(mk::valid_chunk(3, 24));  // not a power of two
  EXPECT_FALSE(mk::valid_chunk(16, 24));  // does not divide
  EXPECT_FALSE(mk::valid_chunk(0, 24));
  EXPECT_EQ(mk::unit_chunk(shape(2, 4, 0)), 4);
  EXPECT_EQ(mk::unit_chunk(shape(2, 4, 2)), 2);
}

// NIBBLE_MK_SYNCWARP: each block's last warp (it takes the barriers) gets an empty range at the end
// of its block's, the other 15 share the units. 2 blocks (32 warps), 3 tiles x 10 groups tile-major
// (u = 10 tile + group): 30 units over 30 working warps, one each.
TEST(MegakernelPlan, SyncWarpByHand) {
  const mk::PackedMatrix m = shape(3, 10, 0);
  const int nw = 2 * mk::kWarps;
  expect_plan(mk::gemv_plan_decode(m, 0, nw, true), 0, 1, 0, 0, 0, "block 0 warp 0");
  expect_plan(mk::gemv_plan_decode(m, 14, nw, true), 14, 15, 1, 4, 4, "block 0 warp 14: tile 1 group 4");
  expect_plan(mk::gemv_plan_decode(m, 15, nw, true), 15, 15, 1, 5, 4,
              "block 0 warp 15: empty at 15, j_last the group of unit 14 (block_groups reads it)");
  expect_plan(mk::gemv_plan_decode(m, 16, nw, true), 15, 16, 1, 5, 5, "block 1 warp 0");
  // past the last unit, its coordinates are those of the next chunk's first unit (tile 0, group 10),
  // as gemv_plan's for an empty range at the end
  expect_plan(mk::gemv_plan_decode(m, 31, nw, true), 30, 30, 0, 10, 9, "block 1 warp 15: empty at the end");
  // Without the switch: gemv_plan itself.
  expect_plan(mk::gemv_plan_decode(m, 15, nw, false), 14, 15, 1, 4, 4, "warp 15 of 32: unit 14");
}

// The full config's shapes on an H200's 2112 warps: the ranges tile [0, total) in order, differ by
// at most one unit, and tile0 / j0 / j_last are the units' coordinates; with the sync warp
// (NIBBLE_MK_SYNCWARP) the same, and every block's last warp has an empty range.
TEST(MegakernelPlan, FullShapesPartitionTheUnits) {
  const int nw = 132 * mk::kWarps;
  const auto partitions = [&](const mk::PackedMatrix& m, bool sync_warp) {
    const uint32_t total = uint32_t(m.tiles) * uint32_t(m.groups);
    // (c, tile, group in chunk) by hand: G groups per chunk, tiles x G units per chunk
    const uint32_t G = uint32_t(mk::unit_chunk(m)), per = uint32_t(m.tiles) * G;
    const auto tile_of = [&](uint32_t u) { return u % per / G; };
    const auto group_of = [&](uint32_t u) { return u / per * G + u % per % G; };
    uint32_t next = 0, lo = total, hi = 0;
    for (int gw = 0; gw < nw; ++gw) {
      const mk::GemvPlan p = mk::gemv_plan_decode(m, gw, nw, sync_warp);
      ASSERT_EQ(p.u0, next) << gw;
      next = p.u1;
      if (p.u0 < total) {
        EXPECT_EQ(p.tile0, tile_of(p.u0)) << gw;
        EXPECT_EQ(p.j0, group_of(p.u0)) << gw;
      }
      EXPECT_EQ(p.j_last, group_of(p.u1 - 1)) << gw;
      if (sync_warp && gw % mk::kWarps == mk::kWarps - 1) {
        EXPECT_EQ(p.u1, p.u0) << gw;
        continue;
      }
      lo = std::min(lo, p.u1 - p.u0);
      hi = std::max(hi, p.u1 - p.u0);
    }
    EXPECT_EQ(next, total);
    EXPECT_LE(hi - lo, 1u);
  };
  for (const mk::PackedMatrix& m : {shape(320, 24, 0), shape(192, 24, 2), shape(1024, 24, 0), shape(192, 64, 4),
                                    shape(192, 64, 1), shape(8016, 24, 0)}) {
    ASSERT_TRUE(mk::gemv_plan_fits(m));
    partitions(m, false);
    partitions(m, true);
  }
  // Fewer than 2^31 units (32-bit unit counts with room for a stage past the end), 65535 groups.
  EXPECT_TRUE(mk::gemv_plan_fits(shape(32768, 65535, 0)));  // 2^31 - 2^15 units
  EXPECT_FALSE(mk::gemv_plan_fits(shape(32768, 65536, 0)));
  EXPECT_FALSE(mk::gemv_plan_fits(shape(65536, 32768, 1)));  // 2^31 units
  EXPECT_TRUE(mk::gemv_plan_fits(shape(2, 24, 8)));
  EXPECT_FALSE(mk::gemv_plan_fits(shape(2, 24, 12)));  // not a power of two: the walk's mask breaks
  EXPECT_FALSE(mk::gemv_plan_fits(shape(2, 24, 16)));  // does not divide the groups
}

}  // namespace
