// test_token_ids.cpp: `fixture import --tokens`'s reader (read_token_ids) on hand-written files: the
// ids it must read, and the message naming the entry for each kind of bad one.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "fixtures/decode/checkpoint_import.h"
#include "tests/test_fixture_util.h"

namespace nibble {
namespace {

std::vector<int64_t> read_text_ids(const std::string& text) {
  test::TempDir dir;
  const std::string path = dir / "ids.txt";
  std::ofstream(path) << text;
  return read_token_ids(path);
}

// The message read_token_ids throws for `text`, "" when it reads it.
std::string refusal(const std::string& text) {
  try {
    (void)read_text_ids(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(TokenIds, ReadsTextAndJson) {
  EXPECT_EQ(read_text_ids("128000 791\n12, 3,4\t5,"), (std::vector<int64_t>{128000, 791, 12, 3, 4, 5}));
  EXPECT_EQ(read_text_ids("  [1, 2 ,3]\n"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(read_text_ids("-1 0"), (std::vector<int64_t>{-1, 0}));  // the vocabulary check is the importer's
  EXPECT_TRUE(read_text_ids(" \n").empty());
  EXPECT_EQ(read_text_ids("\xEF\xBB\xBF" "7 8"), (std::vector<int64_t>{7, 8}));  // a byte order mark first
  EXPECT_EQ(read_text_ids("\xEF\xBB\xBF" "[7]"), (std::vector<int64_t>{7}));
}

TEST(TokenIds, NamesTheBadEntry) {
  // A sign is not how an id is written; stoll alone took "+5" as 5.
  EXPECT_NE(refusal("1 +5").find("entry 1 '+5' is not an integer id"), std::string::npos) << refusal("1 +5");
  EXPECT_NE(refusal("1 2 x7").find("entry 2 'x7'"), std::string::npos);
  EXPECT_NE(refusal("1 -").find("entry 1 '-'"), std::string::npos);
  EXPECT_NE(refusal("99999999999999999999").find("entry 0"), std::string::npos);
  // A comma first, or two in a row: an id missing, which would shift every later one.
  EXPECT_NE(refusal(",1,2").find("a comma before the first id"), std::string::npos) << refusal(",1,2");
  EXPECT_NE(refusal("7,8,,9").find("two commas in a row after entry 1 (id 8)"), std::string::npos)
      << refusal("7,8,,9");
  // JSON: 1e2 is a float to nlohmann (kept as 100.0); the message says how it was written.
  const std::string e = refusal("[5, 1e2]");
  EXPECT_NE(e.find("entry 1"), std::string::npos) << e;
  EXPECT_NE(e.find("written with a '.' or an exponent"), std::string::npos) << e;
  EXPECT_NE(refusal("[5, \"6\"]").find("a JSON string"), std::string::npos);
  EXPECT_NE(refusal("[1, 2").find("(it starts with '[', so it is read as JSON) is not valid JSON"), std::string::npos);
  EXPECT_NE(refusal("[[1]]").find("a JSON array"), std::string::npos);
}

}  // namespace
}  // namespace nibble
