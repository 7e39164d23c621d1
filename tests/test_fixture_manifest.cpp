// test_fixture_manifest.cpp: the tiny fixture's contents, its manifest (round trip and every kind
// of bad file), verify_fixture catching corruption, the cache folder and ensure_decode_fixture.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "fixtures/bf16.h"
#include "fixtures/decode/decode_fixture.h"
#include "fixtures/fixture.h"
#include "fixtures/decode/quantise.h"
#include "fixtures/safetensors.h"
#include "fixtures/sha256.h"
#include "test_fixture_util.h"

namespace nibble {
namespace {

namespace fs = std::filesystem;

// Expect fn() to throw std::runtime_error containing every string in `parts`.
template <class Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

class TinyFixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    std::vector<std::string> phases;
    manifest_ = new FixtureManifest(build_decode_fixture(
        decode_config("tiny"), 0, dir_->path(), 2,
        [&](const std::string& phase, double f) {
          EXPECT_GE(f, 0.0);
          EXPECT_LE(f, 1.0);
          if (phases.empty() || phases.back() != phase) phases.push_back(phase);
        }));
    EXPECT_EQ(phases, (std::vector<std::string>{"generate", "write", "hash"}));
  }
  static void TearDownTestSuite() {
    delete manifest_;
    delete dir_;
  }
  static test::TempDir* dir_;
  static FixtureManifest* manifest_;
};
test::TempDir* TinyFixture::dir_ = nullptr;
FixtureManifest* TinyFixture::manifest_ = nullptr;

TEST_F(TinyFixture, FileHoldsTheTaskTensorsInOrder) {
  const DecodeConfig cfg = decode_config("tiny");
  SafetensorsFile f(*dir_ / kFixtureModelFile);
  const auto specs = cfg.tensors();
  ASSERT_EQ(f.entries().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(f.entries()[i].name, specs[i].name);
    EXPECT_EQ(f.entries()[i].dtype, specs[i].dtype) << specs[i].name;
    EXPECT_EQ(f.entries()[i].shape, specs[i].shape) << specs[i].name;
  }
  EXPECT_EQ(f.metadata().at("task"), kDecodeTask);
  EXPECT_EQ(f.metadata().at("config"), "tiny");
  EXPECT_EQ(f.metadata().at("seed"), "0");
  EXPECT_EQ(f.metadata().at("generator_version"), std::to_string(kGeneratorVersion));
  EXPECT_EQ(int64_t(f.file_size()), manifest_->file_bytes);
  EXPECT_EQ(sha256_file_hex(f.path()), manifest_->file_sha256);
  for (const auto& e : f.entries())
    EXPECT_EQ(sha256_hex(f.data(e.name), e.nbytes()), manifest_->tensor_sha256.at(e.name)) << e.name;
}

// The distribution as documented: unit-RMS rows after projection scaling, gains near 1, a unit
// variance KV prefix followed by exact zeros, tokens in range.
TEST_F(TinyFixture, ValuesFollowTheDocumentedDistribution) {
  const DecodeConfig cfg = decode_config("tiny");
  const auto& c = cfg.dims;
  SafetensorsFile f(*dir_ / kFixtureModelFile);
  for (const auto& w : cfg.quant_weights()) {
    std::vector<float> v(size_t(w.out * w.in));
    std::vector<uint16_t> scale(size_t(w.out * w.in / c.group));
    std::memcpy(scale.data(), f.data(w.name + ".scale"), scale.size() * 2);
    dequantise_int4(f.data(w.name + ".packed"), scale.data(), f.data(w.name + ".zero"), w.out, w.in,
                    c.group, v.data());
    double s2 = 0;
    for (float x : v) s2 += double(x) * x;
    // E[w^2] = 1 / in, plus the quantisation noise (~1% of it).
    EXPECT_NEAR(s2 / double(v.size()) * double(w.in), 1.0, 0.05) << w.name;
    for (int64_t g = 0; g < w.out * w.in / c.group; ++g) ASSERT_LE(f.data(w.name + ".zero")[g], 15);
  }
  for (const auto& s : cfg.tensors()) {
    if (s.name.find("norm") == std::string::npos) continue;
    std::vector<uint16_t> g(size_t(s.numel()));
    std::memcpy(g.data(), f.data(s.name), g.size() * 2);
    for (uint16_t b : g) {
      // 1 + 0.2 * (u - 0.5) is in [0.9, 1.1); bf16 steps are 2^-8 below 1 and 2^-7 above.
      ASSERT_GE(bf16_to_f32(b), 0.9f - 0.004f) << s.name;
      ASSERT_LE(bf16_to_f32(b), 1.1f + 0.008f) << s.name;
    }
  }
  const int64_t slice = int64_t(c.max_seq) * c.hd, filled = int64_t(cfg.prefill) * c.hd;
  for (int l = 0; l < c.layers; ++l)
    for (const char* kv : {"k", "v"}) {
      const std::string name = "kv." + std::to_string(l) + "." + kv;
      std::vector<uint16_t> x(size_t(f.entry(name).nbytes() / 2));
      std::memcpy(x.data(), f.data(name), x.size() * 2);
      double s2 = 0;
      int64_t n = 0;
      for (int64_t r = 0; r < int64_t(c.batch) * c.n_kv; ++r)
        for (int64_t e = 0; e < slice; ++e) {
          const uint16_t b = x[size_t(r * slice + e)];
          if (e >= filled) {
            ASSERT_EQ(b, 0) << name << " slot " << e / c.hd << " past the prefix";
          } else {
            s2 += double(bf16_to_f32(b)) * bf16_to_f32(b);
            ++n;
          }
        }
      EXPECT_NEAR(s2 / double(n), 1.0, 0.05) << name;
    }
  std::vector<int64_t> tok(size_t(cfg.decode_steps) * c.batch);
  std::memcpy(tok.data(), f.data("tokens"), tok.size() * 8);
  for (int64_t t : tok) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, c.vocab);
  }
}

TEST_F(TinyFixture, ManifestRoundTrip) {
  const FixtureManifest m = read_manifest(dir_->path());
  EXPECT_EQ(m.task, kDecodeTask);
  EXPECT_EQ(m.config, "tiny");
  EXPECT_EQ(m.seed, 0u);
  EXPECT_EQ(m.generator_version, kGeneratorVersion);
  EXPECT_EQ(m.file, "model.safetensors");
  EXPECT_EQ(m.file_bytes, manifest_->file_bytes);
  EXPECT_EQ(m.file_sha256, manifest_->file_sha256);
  EXPECT_EQ(m.tensor_sha256, manifest_->tensor_sha256);
  EXPECT_EQ(m.tensor_sha256.size(), decode_config("tiny").tensors().size());
  EXPECT_EQ(m.threads, 2);
  EXPECT_GT(m.build_seconds, 0.0);
  const auto j = manifest_to_json(m);
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"task", "config", "seed", "generator_version", "file", "file_bytes",
                                            "file_sha256", "tensor_sha256", "build_seconds", "threads"}));
  verify_fixture(dir_->path(), m);
}

TEST_F(TinyFixture, VerifyCatchesCorruption) {
  test::TempDir copy;
  fs::copy(dir_->path(), copy.path(), fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  const FixtureManifest m = read_manifest(copy.path());
  const std::string model = copy / kFixtureModelFile;
  size_t off = 0;
  {
    SafetensorsFile f(model);
    off = size_t(f.data("layers.1.up.packed") - f.file_bytes()) + 17;
  }
  {
    std::fstream io(model, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(std::streamoff(off));
    char b = 0;
    io.read(&b, 1);
    b ^= 0x10;  // one bit of one code
    io.seekp(std::streamoff(off));
    io.write(&b, 1);
  }
  expect_error([&] { verify_fixture(copy.path(), m); },
               {model, "does not match its manifest", "layers.1.up.packed", "nibble fixture build",
                "--config tiny --seed 0 --out " + copy.path()});
  fs::resize_file(model, fs::file_size(model) - 1);
  expect_error([&] { verify_fixture(copy.path(), m); }, {model, "bytes, its manifest says", "nibble fixture build"});
  fs::remove(model);
  expect_error([&] { verify_fixture(copy.path(), m); }, {model, "cannot be read"});
}

// The grader's check after a candidate ran: unchanged files pass, a rewritten tensor (and a
// rewritten manifest that claims the new hash) is reported against the manifest read before.
TEST_F(TinyFixture, FixtureChangedAfterTheCandidateRan) {
  test::TempDir copy;
  fs::copy(dir_->path(), copy.path(), fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  const FixtureManifest before = read_manifest(copy.path());
  EXPECT_EQ(fixture_changed(copy.path(), before), "");
  const std::string model = copy / kFixtureModelFile;
  size_t off = 0;
  {
    SafetensorsFile f(model);
    off = size_t(f.data("layers.0.q.packed") - f.file_bytes()) + 3;
  }
  {
    std::fstream io(model, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(std::streamoff(off));
    io.put(char(0x5A));
  }
  // A candidate that also rewrote the manifest: the check uses the one read before it ran.
  FixtureManifest forged = before;
  forged.file_sha256 = std::string(64, '0');
  write_fixture_text(copy / "manifest.json", manifest_to_json(forged).dump(2));
  const std::string why = fixture_changed(copy.path(), before);
  EXPECT_NE(why.find("the fixture changed on disk while the candidate ran"), std::string::npos) << why;
  EXPECT_NE(why.find("layers.0.q.packed"), std::string::npos) << why;
}

TEST(Manifest, ReadErrors) {
  test::TempDir dir;
  const std::string path = dir / kFixtureManifestFile;
  // (the rebuild command, which needs the task, config and seed, is the callers': test_cli)
  expect_error([&] { read_manifest(dir.path()); }, {path, "not found"});
  test::write_bytes(path, "{\"task\": ");
  expect_error([&] { read_manifest(dir.path()); }, {path, "not valid JSON"});
  test::write_bytes(path, "[]");
  expect_error([&] { read_manifest(dir.path()); }, {path, "not a JSON object"});

  FixtureManifest good;
  good.task = kDecodeTask;
  good.config = "tiny";
  good.seed = 3;
  good.generator_version = kGeneratorVersion;
  good.file = "model.safetensors";
  good.file_bytes = 10;
  good.file_sha256 = std::string(64, 'a');
  good.tensor_sha256 = {{"x", std::string(64, '0')}};
  test::write_bytes(path, manifest_to_json(good).dump());
  const FixtureManifest back = read_manifest(dir.path());
  EXPECT_EQ(back.seed, 3u);
  EXPECT_EQ(back.tensor_sha256, good.tensor_sha256);

  auto with = [&](const std::string& key, const std::optional<nlohmann::ordered_json>& value) {
    auto j = manifest_to_json(good);
    if (value) j[key] = *value; else j.erase(key);
    test::write_bytes(path, j.dump());
  };
  const std::optional<nlohmann::ordered_json> missing;
  with("seed", missing);
  expect_error([&] { read_manifest(dir.path()); }, {path, "'seed'", "missing"});
  with("seed", -1);
  expect_error([&] { read_manifest(dir.path()); }, {path, "'seed'", "non-negative integer"});
  with("task", 5);
  expect_error([&] { read_manifest(dir.path()); }, {path, "'task'", "a string"});
  with("file_sha256", "ABC");
  expect_error([&] { read_manifest(dir.path()); }, {path, "'file_sha256'", "hex"});
  with("file", "../../etc/passwd");
  expect_error([&] { read_manifest(dir.path()); }, {path, "'file'"});
  with("tensor_sha256", nlohmann::ordered_json{{"x", "zz"}});
  expect_error([&] { read_manifest(dir.path()); }, {path, "tensor_sha256['x']"});
  with("generator_version", "1");
  expect_error([&] { read_manifest(dir.path()); }, {path, "'generator_version'"});
}

TEST(Manifest, DefaultFixtureDir) {
  auto set = [](const char* k, const char* v) {
    if (v) setenv(k, v, 1); else unsetenv(k);
  };
  const char* keep[] = {std::getenv("NIBBLE_CACHE_DIR"), std::getenv("XDG_CACHE_HOME"), std::getenv("HOME")};
  const std::string saved[] = {keep[0] ? keep[0] : "", keep[1] ? keep[1] : "", keep[2] ? keep[2] : ""};
  const std::string tail = "/fixtures/" + std::string(kDecodeTask) + "/tiny/seed7-g" + std::to_string(kGeneratorVersion);
  set("NIBBLE_CACHE_DIR", "/c/nib");
  set("XDG_CACHE_HOME", "/x");
  set("HOME", "/h");
  EXPECT_EQ(default_fixture_dir(kDecodeTask, "tiny", 7), "/c/nib" + tail);
  set("NIBBLE_CACHE_DIR", "");
  EXPECT_EQ(default_fixture_dir(kDecodeTask, "tiny", 7), "/x/nibble" + tail);
  set("XDG_CACHE_HOME", nullptr);
  EXPECT_EQ(default_fixture_dir(kDecodeTask, "tiny", 7), "/h/.cache/nibble" + tail);
  set("HOME", nullptr);
  EXPECT_THROW(default_fixture_dir(kDecodeTask, "tiny", 7), std::runtime_error);
  set("NIBBLE_CACHE_DIR", keep[0] ? saved[0].c_str() : nullptr);
  set("XDG_CACHE_HOME", keep[1] ? saved[1].c_str() : nullptr);
  set("HOME", keep[2] ? saved[2].c_str() : nullptr);
}

TEST(Manifest, EnsureBuildsOnceAndRebuildsOnMismatch) {
  test::TempDir dir;
  const DecodeConfig cfg = decode_config("tiny");
  int builds = 0;
  auto count = [&](const std::string& phase, double f) { builds += (phase == "generate" && f == 0.0); };
  const FixtureManifest a = ensure_decode_fixture(cfg, 5, dir.path(), 2, true, count);
  EXPECT_EQ(builds, 1);
  const FixtureManifest b = ensure_decode_fixture(cfg, 5, dir.path(), 2, true, count);
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(a.file_sha256, b.file_sha256);
  const FixtureManifest c = ensure_decode_fixture(cfg, 6, dir.path(), 2, false, count);  // other seed
  EXPECT_EQ(builds, 2);
  EXPECT_NE(c.file_sha256, a.file_sha256);
  fs::resize_file(dir / kFixtureModelFile, 100);  // damaged: even the unverified path notices the size
  ensure_decode_fixture(cfg, 6, dir.path(), 2, false, count);
  EXPECT_EQ(builds, 3);
  verify_fixture(dir.path(), read_manifest(dir.path()));
}

TEST(Manifest, BuildRejectsUnquantisableConfig) {
  test::TempDir dir;
  DecodeConfig cfg = decode_config("tiny");
  cfg.dims.group = 96;  // 256 % 96 != 0
  EXPECT_THROW(build_decode_fixture(cfg, 0, dir.path(), 1, nullptr), std::invalid_argument);
  EXPECT_FALSE(fs::exists(dir / kFixtureModelFile));
}

TEST_F(TinyFixture, AManifestClaimingAnotherSeedIsCaught) {
  // The bytes match the manifest's hashes, but the manifest says seed 8: the file's own metadata
  // (covered by those hashes) says 0.
  FixtureManifest m = *manifest_;
  m.seed = 8;
  // The advice removes the folder first: a build over it refuses the other seed's file.
  expect_error([&] { verify_fixture(dir_->path(), m); }, {"says seed 8", "built with seed 0", "remove it, then `", "--seed 8"});
  m = *manifest_;
  m.config = "full";
  expect_error([&] { verify_fixture(dir_->path(), m); }, {"says config full", "built with config tiny"});
  EXPECT_NO_THROW(verify_fixture(dir_->path(), *manifest_));
}

TEST(FixtureManifest, AManifestThatIsAFolderIsNamed) {
  test::TempDir t;
  fs::create_directories(t.path() + "/" + kFixtureManifestFile);
  expect_error([&] { read_manifest(t.path()); }, {"is not a file", kFixtureManifestFile});
}

}  // namespace
}  // namespace nibble
