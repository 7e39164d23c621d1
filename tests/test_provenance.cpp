// test_provenance.cpp: the commit a report names. NIBBLE_SOURCE_COMMIT, when set, wins over git (a
// tree copied to a GPU machine may carry a stale .git: reports then named the session-start commit),
// and git's own answer is kept beside it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "harness/provenance.h"

using namespace nibble;

namespace {
/** Sets or unsets an environment variable for one scope, restoring the old value. */
class EnvVar {
 public:
  EnvVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~EnvVar() {
    if (had_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};
}  // namespace

TEST(Provenance, SourceCommitVariableWinsOverGit) {
  EnvVar v("NIBBLE_SOURCE_COMMIT", "0123456789abcdef0123456789abcdef01234567");
  const auto j = git_provenance();
  EXPECT_EQ(j["commit"], "0123456789abcdef0123456789abcdef01234567");
  EXPECT_EQ(j["commit_from"], "NIBBLE_SOURCE_COMMIT");
  EXPECT_TRUE(j["dirty"].is_null());  // unknown for a copied tree
}

TEST(Provenance, WithoutTheVariableGitOrUnknown) {
  EnvVar v("NIBBLE_SOURCE_COMMIT", nullptr);
  const auto j = git_provenance();
  const std::string from = j["commit_from"];
  if (from == "git") {
    EXPECT_EQ(j["commit"].get<std::string>().size(), 40u);
    EXPECT_TRUE(j["dirty"].is_boolean());
    EXPECT_FALSE(j.contains("git_commit"));
  } else {
    EXPECT_EQ(from.rfind("unknown", 0), 0u) << from;
    EXPECT_TRUE(j["commit"].is_null());
  }
}
