// test_fixture_safetensors.cpp: the writer's exact bytes, a round trip through the mmap reader, and
// the reader's refusal of truncated files, bad JSON and bad offsets, each with a clear message.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "fixtures/safetensors.h"
#include "fixtures/sha256.h"
#include "test_fixture_util.h"

namespace nibble {
namespace {

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char(uint8_t(n >> (8 * i)));
  return s;
}

// A raw safetensors file from a header string and a data section (for the malformed cases).
std::string raw_file(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

// Expect construction to throw a runtime_error whose message names the file and contains `what`.
void expect_rejected(const std::string& path, const std::string& what) {
  try {
    SafetensorsFile f(path);
    ADD_FAILURE() << "accepted " << path << ", expected an error containing '" << what << "'";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
}

struct Sample {
  float f[3] = {1.0f, -2.5f, 3.25f};
  uint16_t h[2] = {0x3F80, 0xC000};
  uint8_t u[5] = {1, 2, 3, 4, 255};
  int64_t i[2] = {-7, 1234567890123};
  std::vector<TensorView> views() const {
    return {{"zeta", DType::F32, {3}, f, sizeof f},
            {"alpha.bf16", DType::BF16, {1, 2}, h, sizeof h},
            {"mid", DType::U8, {5}, u, sizeof u},
            {"empty", DType::F32, {0, 4}, nullptr, 0},
            {"tokens", DType::I64, {2, 1}, i, sizeof i}};
  }
};

TEST(Safetensors, HeaderIsCanonical) {
  Sample s;
  const std::string h = safetensors_header(s.views(), {{"seed", "7"}, {"task", "t"}});
  // Sorted keys (nested too), compact, data offsets in the order given, spaces to a multiple of 8.
  const std::string expect =
      "{\"__metadata__\":{\"seed\":\"7\",\"task\":\"t\"},"
      "\"alpha.bf16\":{\"data_offsets\":[12,16],\"dtype\":\"BF16\",\"shape\":[1,2]},"
      "\"empty\":{\"data_offsets\":[21,21],\"dtype\":\"F32\",\"shape\":[0,4]},"
      "\"mid\":{\"data_offsets\":[16,21],\"dtype\":\"U8\",\"shape\":[5]},"
      "\"tokens\":{\"data_offsets\":[21,37],\"dtype\":\"I64\",\"shape\":[2,1]},"
      "\"zeta\":{\"data_offsets\":[0,12],\"dtype\":\"F32\",\"shape\":[3]}}";
  ASSERT_EQ(h.size() % 8, 0u);
  ASSERT_GE(h.size(), expect.size());
  EXPECT_EQ(h.substr(0, expect.size()), expect);
  EXPECT_EQ(h.substr(expect.size()), std::string(h.size() - expect.size(), ' '));
  // No metadata: no __metadata__ key at all (as the reference implementation writes it).
  EXPECT_EQ(safetensors_header(s.views(), {}).find("__metadata__"), std::string::npos);
}

TEST(Safetensors, RoundTrip) {
  test::TempDir dir;
  Sample s;
  const std::string path = dir / "a.safetensors";
  write_safetensors(path, s.views(), {{"task", "t"}, {"seed", "7"}});
  // Only the file itself: the temporary is renamed, not left behind.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);

  SafetensorsFile f(path);
  EXPECT_EQ(f.metadata().at("task"), "t");
  EXPECT_EQ(f.metadata().at("seed"), "7");
  ASSERT_EQ(f.entries().size(), 5u);
  // entries() is in data order, which is the order written.
  const char* order[] = {"zeta", "alpha.bf16", "mid", "empty", "tokens"};
  for (size_t k = 0; k < 5; ++k) EXPECT_EQ(f.entries()[k].name, order[k]);
  EXPECT_EQ(f.entry("zeta").dtype, DType::F32);
  EXPECT_EQ(f.entry("alpha.bf16").shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(std::memcmp(f.data("zeta"), s.f, sizeof s.f), 0);
  EXPECT_EQ(std::memcmp(f.data("alpha.bf16"), s.h, sizeof s.h), 0);
  EXPECT_EQ(std::memcmp(f.data("mid"), s.u, sizeof s.u), 0);
  EXPECT_EQ(std::memcmp(f.data("tokens"), s.i, sizeof s.i), 0);
  EXPECT_EQ(f.entry("empty").nbytes(), 0u);
  EXPECT_TRUE(f.has("mid"));
  EXPECT_FALSE(f.has("nope"));
  try {
    f.entry("nope");
    ADD_FAILURE() << "no throw for a missing tensor";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }

  // Same tensors, same bytes: write again elsewhere and compare.
  const std::string path2 = dir / "b.safetensors";
  write_safetensors(path2, s.views(), {{"seed", "7"}, {"task", "t"}});
  EXPECT_EQ(test::read_bytes(path), test::read_bytes(path2));
  EXPECT_EQ(sha256_file_hex(path), sha256_file_hex(path2));
}

TEST(Safetensors, WriterRejectsBadInput) {
  test::TempDir dir;
  float f[2] = {0, 0};
  const std::string path = dir / "x.safetensors";
  EXPECT_THROW(write_safetensors(path, {{"a", DType::F32, {3}, f, sizeof f}}), std::runtime_error);
  EXPECT_THROW(write_safetensors(path, {{"a", DType::F32, {2}, f, sizeof f}, {"a", DType::F32, {2}, f, sizeof f}}),
               std::runtime_error);
  EXPECT_THROW(write_safetensors(path, {{"__metadata__", DType::F32, {2}, f, sizeof f}}), std::runtime_error);
  EXPECT_FALSE(std::filesystem::exists(path));
  try {
    write_safetensors(dir / "no/such/dir/x.safetensors", {{"a", DType::F32, {2}, f, sizeof f}});
    ADD_FAILURE() << "wrote into a missing folder";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/dir"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, RejectsTruncatedFile) {
  test::TempDir dir;
  Sample s;
  const std::string good = dir / "good.safetensors";
  write_safetensors(good, s.views(), {});
  const auto bytes = test::read_bytes(good);
  const std::string all(bytes.begin(), bytes.end());

  const std::string cut = dir / "cut.safetensors";
  test::write_bytes(cut, all.substr(0, all.size() - 3));  // data section short by 3 bytes
  expect_rejected(cut, "truncated");
  test::write_bytes(cut, all.substr(0, 20));  // the header itself is cut
  expect_rejected(cut, "truncated");
  test::write_bytes(cut, all.substr(0, 5));  // not even the length field
  expect_rejected(cut, "truncated");
  test::write_bytes(cut, all + "xyz");  // trailing bytes after the last tensor
  expect_rejected(cut, "after the last tensor");
  expect_rejected(dir / "missing.safetensors", "cannot open");
}

TEST(Safetensors, RejectsBadJsonHeader) {
  test::TempDir dir;
  const std::string p = dir / "bad.safetensors";
  test::write_bytes(p, raw_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]", "xy"));
  expect_rejected(p, "not valid JSON");
  test::write_bytes(p, raw_file("[1,2,3] ", ""));
  expect_rejected(p, "not a JSON object");
  test::write_bytes(p, raw_file("{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", "abcdefgh"));
  expect_rejected(p, "unsupported dtype");
  test::write_bytes(p, raw_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,2]}}", "xy"));
  expect_rejected(p, "non-negative");
  test::write_bytes(p, raw_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[2]}}", "xy"));
  expect_rejected(p, "data_offsets");
  test::write_bytes(p, raw_file("{\"__metadata__\":{\"k\":1}}", ""));
  expect_rejected(p, "__metadata__");
  test::write_bytes(p, le64(uint64_t(1) << 40) + "{}");
  expect_rejected(p, "implausible");
  // A tensor named twice: which entry counts is the reader's choice (nlohmann and Python: the last).
  test::write_bytes(p, raw_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                                "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", "xy"));
  expect_rejected(p, "key 'a' twice");
}

/** The bounded parser refuses a key twice in one object, at any depth, and only there: the same key
 *  in two objects (siblings, or objects in an array) is not a duplicate. */
TEST(BoundedJson, RefusesAKeyTwiceInOneObject) {
  const auto refused = [](const std::string& text) {
    try {
      (void)parse_ordered_json_bounded(text, "doc");
      (void)parse_json_bounded(text, "doc");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refused("{\"a\":1,\"a\":2}").find("doc has the key 'a' twice"), std::string::npos);
  EXPECT_NE(refused("{\"x\":{\"d\":1,\"e\":[{\"k\":1,\"k\":1}]}}").find("key 'x.e.k' twice"), std::string::npos);
  // The path names where (a report has "median" in several places); an escaped key is the same key.
  EXPECT_NE(refused("{\"timing\":{\"gpu_span_us\":{\"median\":1,\"\\u006dedian\":2}}}").find("key 'timing.gpu_span_us.median' twice"),
            std::string::npos);
  EXPECT_NE(refused("{\"x\":{\"a\":1},\"x\":{\"a\":1}}").find("key 'x' twice"), std::string::npos);
  EXPECT_EQ(refused("{\"x\":{\"a\":1},\"y\":{\"a\":1},\"a\":[{\"a\":1},{\"a\":2}]}"), "");
  EXPECT_EQ(refused("[{\"a\":1},{\"a\":1}]"), "");
  // An ordered document holds at most kMaxOrderedJsonKeys keys in one object (its lookups are linear).
  std::string many = "{";
  for (size_t i = 0; i <= kMaxOrderedJsonKeys; ++i) many += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
  many += "}";
  EXPECT_NO_THROW((void)parse_json_bounded(many, "doc"));
  try {
    (void)parse_ordered_json_bounded(many, "doc");
    ADD_FAILURE() << "10,001 keys in one object read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("doc has more than 10000 keys in one object (at 'k10000')"), std::string::npos) << e.what();
  }
  const nlohmann::json j = parse_json_bounded(std::string("{\"b\":{\"a\":1},\"a\":2}"), "doc");
  EXPECT_EQ(j["a"].get<int>(), 2);
  EXPECT_EQ(j["b"]["a"].get<int>(), 1);
}

TEST(Safetensors, RejectsBadOffsets) {
  test::TempDir dir;
  const std::string p = dir / "off.safetensors";
  // End past the data section.
  test::write_bytes(p, raw_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", "xy"));
  expect_rejected(p, "past the end");
  // Size disagrees with shape * dtype.
  test::write_bytes(p, raw_file("{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,2]}}", "xy"));
  expect_rejected(p, "needs 4");
  // A gap between tensors.
  test::write_bytes(p, raw_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                                "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]}}",
                                "xyz"));
  expect_rejected(p, "contiguously");
  // Overlap.
  test::write_bytes(p, raw_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                                "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}",
                                "xyz"));
  expect_rejected(p, "contiguously");
  // Reversed.
  test::write_bytes(p, raw_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,0]}}", "xy"));
  expect_rejected(p, "end before they begin");
  // Negative offset.
  test::write_bytes(p, raw_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[-1,1]}}", "xy"));
  expect_rejected(p, "data_offsets");
}

TEST(Sha256, KnownAnswers) {
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 h;
  h.update("a", 1);
  h.update("bc", 2);
  EXPECT_EQ(h.final_hex(), sha256_hex("abc", 3));
  test::TempDir dir;
  test::write_bytes(dir / "abc", "abc");
  EXPECT_EQ(sha256_file_hex(dir / "abc"), sha256_hex("abc", 3));
  EXPECT_THROW(sha256_file_hex(dir / "missing"), std::runtime_error);
}

}  // namespace
}  // namespace nibble
