// test_megakernel_abi.cpp: libnibble_megakernel.so through the C ABI, the configs it declines.
//
// build_model checks the config before any CUDA call, so this runs on any machine (label cpu):
// what the kernels cannot run (group other than 128, head dims other than 64 / 128, more than 4
// query heads per KV head, inputs too long for shared memory) is NOT_SUPPORTED with a message that
// names the field; a config that breaks the task's own rules (n_q not a multiple of n_kv, a
// non-positive size), a NULL model and another task are answered without touching the GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "harness/solution_library.h"
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

}  // namespace
