// test_solution_library.cpp: a .so that is missing, not a library, of another ABI version, or
// missing an entry point is refused with the matching reason and a message saying what to fix.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "test_binary_dir.h"
#include "harness/atomic_file.h"
#include "harness/process.h"
#include "harness/solution_library.h"

using namespace nibble;

namespace {
std::string bad(const std::string& name) { return test::bindir() + "/tests/lib/libbad_" + name + ".so"; }

LoadError::Kind load_kind(const std::string& path, std::string* msg) {
  try {
    SolutionLibrary lib(path);
  } catch (const LoadError& e) {
    *msg = e.what();
    return e.kind;
  }
  ADD_FAILURE() << path << " loaded but should not have";
  return LoadError::NotFound;
}
}  // namespace

TEST(SolutionLibrary, LoadsAWellFormedSolution) {
  SolutionLibrary lib(bad("nothing"));
  EXPECT_EQ(lib.name(), "bad-nothing");
  EXPECT_NE(lib.build_model, nullptr);
  EXPECT_NE(lib.decode_step, nullptr);
  EXPECT_NE(lib.teardown, nullptr);
}

TEST(SolutionLibrary, AbiMismatch) {
  std::string msg;
  EXPECT_EQ(load_kind(bad("abi_version"), &msg), LoadError::AbiMismatch);
  EXPECT_NE(msg.find("version 42"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rebuild"), std::string::npos) << msg;
}

TEST(SolutionLibrary, MissingSymbol) {
  std::string msg;
  EXPECT_EQ(load_kind(bad("missing_teardown"), &msg), LoadError::MissingSymbol);
  EXPECT_NE(msg.find("nibble_decode_teardown"), std::string::npos) << msg;
}

TEST(SolutionLibrary, NotFound) {
  std::string msg;
  EXPECT_EQ(load_kind("/nonexistent/libx.so", &msg), LoadError::NotFound);
  EXPECT_NE(msg.find("/nonexistent/libx.so"), std::string::npos) << msg;
}

TEST(SolutionLibrary, NotASharedObject) {
  TempDir t;
  write_file_atomic(t.path() + "/libtext.so", "this is not an ELF file\n");
  std::string msg;
  EXPECT_EQ(load_kind(t.path() + "/libtext.so", &msg), LoadError::NotLoadable);
}

TEST(SolutionLibrary, ACutShortLibraryIsNotLoadableNotACrash) {
  // A truncated copy of a good library: the loader would map it and die of SIGBUS on the missing
  // pages (a newcomer's `head -c 20000` copy was predicted Crashed). Refused before dlopen, saying so.
  std::ifstream in(bad("nothing"), std::ios::binary);
  const std::string whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(whole.size(), 4096u);
  TempDir t;
  for (const size_t keep : {size_t(40), size_t(64), whole.size() / 2, whole.size() - 1}) {
    SCOPED_TRACE(keep);
    write_file_atomic(t.path() + "/libcut.so", whole.substr(0, keep));
    std::string msg;
    EXPECT_EQ(load_kind(t.path() + "/libcut.so", &msg), LoadError::NotLoadable);
    EXPECT_NE(msg.find("is cut short: "), std::string::npos) << msg;
    EXPECT_NE(msg.find("the file has " + std::to_string(keep)), std::string::npos) << msg;
  }
  // The whole copy loads.
  write_file_atomic(t.path() + "/libwhole.so", whole);
  SolutionLibrary lib(t.path() + "/libwhole.so");
  EXPECT_EQ(lib.name(), "bad-nothing");
}

// gemm-w4a16-int4's layout query: a known layout is read; anything else makes the library
// NotLoadable, naming the value and the valid ones (include/nibble/nibble_gemm.h).
TEST(SolutionLibrary, TheInt4LayoutIsReadAndAnUnknownOneRefused) {
  const std::string dir = test::bindir() + "/tests/lib/";
  SolutionLibrary awq(dir + "libgemm_int4_layout_1.so", SolutionLibrary::Abi::Gemm);
  EXPECT_EQ(awq.gemm_int4_layout, NIBBLE_INT4_LAYOUT_AWQ);
  try {
    SolutionLibrary bad_layout(dir + "libgemm_int4_layout_9.so", SolutionLibrary::Abi::Gemm);
    ADD_FAILURE() << "a layout of 9 loaded";
  } catch (const LoadError& e) {
    EXPECT_EQ(e.kind, LoadError::NotLoadable);
    EXPECT_NE(std::string(e.what()).find("nibble_gemm_int4_layout() returned 9"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("COMPRESSED_TENSORS (4)"), std::string::npos) << e.what();
  }
}
