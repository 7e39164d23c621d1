// test_fixture_pinned.cpp: the whole-file SHA-256 of the tiny fixture, pinned.
//
// These values were computed once (generator version 1) and are checked in: any machine, compiler
// or thread count must reproduce them. If this fails after a deliberate change to the generator,
// the quantiser, the tensor list or the safetensors writer, bump kGeneratorVersion (fixtures/rng.h)
// and update the values here; if it fails without one, fixture bytes are not deterministic.
#include <gtest/gtest.h>

#include "fixtures/decode/decode_fixture.h"
#include "fixtures/fixture.h"
#include "test_fixture_util.h"

namespace nibble {
namespace {

struct Pinned {
  uint64_t seed;
  int threads;
  const char* file_sha256;
};

class PinnedTiny : public ::testing::TestWithParam<Pinned> {};

TEST_P(PinnedTiny, WholeFileSha256) {
  ASSERT_EQ(kGeneratorVersion, 1) << "generator changed: re-pin the values below for the new version";
  const Pinned p = GetParam();
  test::TempDir dir;
  const FixtureManifest m = build_decode_fixture(decode_config("tiny"), p.seed, dir.path(), p.threads, nullptr);
  EXPECT_EQ(m.file_sha256, p.file_sha256) << "seed " << p.seed << ", " << p.threads << " threads";
  verify_fixture(dir.path(), m);  // and the file on disk is what was hashed
  // The in-memory manifest (what an unpinned cached fixture is compared with) is the written one.
  const FixtureManifest mem = decode_fixture_manifest(decode_config("tiny"), p.seed, p.threads, nullptr);
  EXPECT_EQ(mem.file_sha256, p.file_sha256);
  EXPECT_EQ(mem.file_bytes, m.file_bytes);
  EXPECT_EQ(mem.tensor_sha256, m.tensor_sha256);
  EXPECT_EQ(read_manifest(dir.path()).tensor_sha256, m.tensor_sha256);
}

INSTANTIATE_TEST_SUITE_P(
    GeneratorV1, PinnedTiny,
    ::testing::Values(Pinned{0, 1, "2fd5f4c4149c4943560b4c31a53b31c6705b47f93271719132701b6a160a0489"},
                      Pinned{0, 4, "2fd5f4c4149c4943560b4c31a53b31c6705b47f93271719132701b6a160a0489"},
                      Pinned{1, 2, "e10d62c1e4bc9bb7bceaf877ccd9e14faa81303ab2a43d392e588776a3b62748"}),
    [](const ::testing::TestParamInfo<Pinned>& i) {
      return "seed" + std::to_string(i.param.seed) + "_threads" + std::to_string(i.param.threads);
    });

}  // namespace
}  // namespace nibble
