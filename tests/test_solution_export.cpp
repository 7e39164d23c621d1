// test_solution_export.cpp: solutions/common/export.h on the CPU, what every bundled solution's
// entry points now do at the C ABI boundary: NIBBLE_DECODE_SOLUTION's exports in this binary, and
// GemmSolution's entry bodies (those NIBBLE_GEMM_SOLUTION's exports call; a second use of a macro
// here would define nibble_abi_version twice). Checks: NULL inputs are INVALID_ARGUMENT, a failed
// build/prepare leaves the handle NULL, each exception maps onto its status with its message, an
// empty handle is INTERNAL, teardown of NULL is a no-op, and the handle reaches step and teardown.
// No GPU: teardown's cudaStreamSynchronize is only reached with a handle, tested where a GPU is.
#include <gtest/gtest.h>

#include <memory>
#include <new>
#include <stdexcept>
#include <string>

#include "nibble/nibble.h"
#include "solutions/common/export.h"
#include "test_env.h"

namespace {

/** What the next build does, and what step and teardown saw. */
enum class Build { Ok, NotSupported, BadAlloc, Runtime, Empty };
Build g_build = Build::Ok;

struct Model {
  int steps = 0;
  int32_t last_pos = -1;
};

std::unique_ptr<Model> build(const nibble_decode_model*, cudaStream_t) {
  switch (g_build) {
    case Build::NotSupported:
      throw nibble::sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "group 64 is not supported");
    case Build::BadAlloc:
      throw std::bad_alloc();
    case Build::Runtime:
      throw std::runtime_error("something else");
    case Build::Empty:
      return nullptr;
    case Build::Ok:
      break;
  }
  return std::make_unique<Model>();
}

void step(Model& m, const nibble_tensor*, int32_t pos, nibble_tensor*, cudaStream_t) {
  if (pos < 0) throw nibble::sol::AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "pos < 0");
  ++m.steps;
  m.last_pos = pos;
}

void teardown(Model&, cudaStream_t) {}

}  // namespace

NIBBLE_DECODE_SOLUTION("export-test", build, step, teardown);

namespace {

nibble_decode_model any_model() {
  nibble_decode_model m{};
  m.struct_size = sizeof(m);
  return m;
}

TEST(SolutionExport, NameAndVersion) {
  EXPECT_EQ(nibble_abi_version(), NIBBLE_ABI_VERSION);
  EXPECT_STREQ(nibble_solution_name(), "export-test");
}

TEST(SolutionExport, NullInputsAreInvalidAndLeaveTheHandleNull) {
  g_build = Build::Ok;
  nibble_error err{};
  void* handle = reinterpret_cast<void*>(1);
  EXPECT_EQ(nibble_decode_build_model(nullptr, nullptr, &handle, &err), NIBBLE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(handle, nullptr);
  EXPECT_STREQ(err.message, "build_model: NULL model or handle pointer");
  const nibble_decode_model m = any_model();
  EXPECT_EQ(nibble_decode_build_model(&m, nullptr, nullptr, &err), NIBBLE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nibble_decode_step(nullptr, nullptr, 0, nullptr, nullptr, &err), NIBBLE_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "decode_step: NULL handle");
  EXPECT_EQ(nibble_decode_teardown(nullptr, nullptr, &err), NIBBLE_OK);
}

TEST(SolutionExport, ExceptionsBecomeStatusesAndTheHandleStaysNull) {
  const nibble_decode_model m = any_model();
  const struct {
    Build build;
    nibble_status status;
    const char* message;
  } cases[] = {{Build::NotSupported, NIBBLE_ERR_NOT_SUPPORTED, "group 64 is not supported"},
               {Build::BadAlloc, NIBBLE_ERR_OUT_OF_MEMORY, "host allocation failed"},
               {Build::Runtime, NIBBLE_ERR_INTERNAL, "something else"},
               {Build::Empty, NIBBLE_ERR_INTERNAL, "build_model: the solution returned no handle"}};
  for (const auto& c : cases) {
    g_build = c.build;
    nibble_error err{};
    void* handle = reinterpret_cast<void*>(1);
    EXPECT_EQ(nibble_decode_build_model(&m, nullptr, &handle, &err), c.status) << c.message;
    EXPECT_EQ(handle, nullptr) << c.message;
    EXPECT_STREQ(err.message, c.message);
  }
}

TEST(SolutionExport, TheHandleReachesStep) {
  g_build = Build::Ok;
  const nibble_decode_model m = any_model();
  nibble_error err{};
  void* handle = nullptr;
  ASSERT_EQ(nibble_decode_build_model(&m, nullptr, &handle, &err), NIBBLE_OK) << err.message;
  ASSERT_NE(handle, nullptr);
  EXPECT_EQ(nibble_decode_step(handle, nullptr, 7, nullptr, nullptr, &err), NIBBLE_OK) << err.message;
  EXPECT_EQ(nibble_decode_step(handle, nullptr, -1, nullptr, nullptr, &err), NIBBLE_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "pos < 0");
  const Model& model = *static_cast<const Model*>(handle);
  EXPECT_EQ(model.steps, 1);
  EXPECT_EQ(model.last_pos, 7);
  delete static_cast<Model*>(handle);  // teardown would synchronise a stream: GPU tests cover it
}

// ---- the GEMM family's entry bodies --------------------------------------------------------------

struct Gemm {
  int runs = 0;
};

std::unique_ptr<Gemm> prepare(const nibble_gemm_problem* p, cudaStream_t) {
  if (p->M > 4) throw nibble::sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "M > 4");
  return std::make_unique<Gemm>();
}
void run(Gemm& g, const nibble_tensor*, nibble_tensor*, cudaStream_t) { ++g.runs; }
void gemm_teardown(Gemm&, cudaStream_t) {}

constexpr nibble::sol::GemmSolution kGemm{prepare, run, gemm_teardown};

TEST(SolutionExport, GemmEntries) {
  nibble_error err{};
  void* handle = reinterpret_cast<void*>(1);
  EXPECT_EQ(kGemm.prepare_entry(nullptr, nullptr, &handle, &err), NIBBLE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(handle, nullptr);
  EXPECT_STREQ(err.message, "prepare: NULL problem or handle pointer");
  nibble_gemm_problem p{};
  p.M = 8;
  handle = reinterpret_cast<void*>(1);
  EXPECT_EQ(kGemm.prepare_entry(&p, nullptr, &handle, &err), NIBBLE_ERR_NOT_SUPPORTED);
  EXPECT_EQ(handle, nullptr);
  EXPECT_STREQ(err.message, "M > 4");
  EXPECT_EQ(kGemm.run_entry(nullptr, nullptr, nullptr, nullptr, &err), NIBBLE_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "run: NULL handle");
  p.M = 1;
  ASSERT_EQ(kGemm.prepare_entry(&p, nullptr, &handle, &err), NIBBLE_OK) << err.message;
  EXPECT_EQ(kGemm.run_entry(handle, nullptr, nullptr, nullptr, &err), NIBBLE_OK) << err.message;
  EXPECT_EQ(static_cast<Gemm*>(handle)->runs, 1);
  delete static_cast<Gemm*>(handle);
  EXPECT_EQ(kGemm.teardown_entry(nullptr, nullptr, &err), NIBBLE_OK);
}

// ---- the solutions' measurement switches from the environment (abi_util.h) ----------------------

TEST(SolutionEnv, WholeNumbersOnlyInRange) {
  using nibble::sol::parse_whole;
  EXPECT_EQ(parse_whole("0", 0, 8), 0);
  EXPECT_EQ(parse_whole("8", 0, 8), 8);
  EXPECT_EQ(parse_whole("-3", -5, 5), -3);
  EXPECT_EQ(parse_whole("+4", 0, 8), 4);
  // What atoi read as a number (or as 0) is refused.
  for (const char* bad : {"", "9", "-1", "4x", "x4", " 4", "4 ", "4.0", "0x4", "99999999999999999999"})
    EXPECT_FALSE(parse_whole(bad, 0, 8).has_value()) << "'" << bad << "'";
}

TEST(SolutionEnv, AMistypedSwitchIsRefusedThroughTheAbi) {
  const char* name = "NIBBLE_TEST_SOLUTION_SWITCH";
  ASSERT_TRUE(nibble::test::set_or_unset_env(name, nullptr));
  EXPECT_FALSE(nibble::sol::env_whole(name, 1, 8, "1 to 8").has_value());
  EXPECT_TRUE(nibble::sol::env_switch(name, true, "on", "off"));
  ASSERT_TRUE(nibble::test::set_or_unset_env(name, "4"));
  EXPECT_EQ(nibble::sol::env_whole(name, 1, 8, "1 to 8"), 4);
  ASSERT_TRUE(nibble::test::set_or_unset_env(name, "0"));
  EXPECT_FALSE(nibble::sol::env_switch(name, true, "on", "off"));
  // A prepare that reads it: the typo comes back as INVALID_ARGUMENT naming the switch, its value
  // and what it takes, and no handle.
  ASSERT_TRUE(nibble::test::set_or_unset_env(name, "yes"));
  nibble_error err{};
  const nibble_status s = nibble::sol::abi_guard(&err, [&] { nibble::sol::env_switch(name, false, "on", "off"); });
  EXPECT_EQ(s, NIBBLE_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "NIBBLE_TEST_SOLUTION_SWITCH=yes: 1 (on) or 0 (off)");
  ASSERT_TRUE(nibble::test::set_or_unset_env(name, "01"));  // a switch is exactly 1 or 0
  EXPECT_THROW(nibble::sol::env_switch(name, false, "on", "off"), nibble::sol::AbiFailure);
  ASSERT_TRUE(nibble::test::set_or_unset_env(name, "12"));
  EXPECT_THROW(nibble::sol::env_whole(name, 1, 8, "1 to 8"), nibble::sol::AbiFailure);
  ASSERT_TRUE(nibble::test::set_or_unset_env(name, nullptr));
}

}  // namespace
