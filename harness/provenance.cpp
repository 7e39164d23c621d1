// provenance.cpp
#include "harness/provenance.h"

#include "nibble_build_commit.h"  // generated at build time (cmake/build_commit.cmake)

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace nibble {

namespace {
/** stdout of a shell command, trailing newline stripped; "" on failure. */
std::string capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  std::array<char, 256> buf{};
  while (fgets(buf.data(), int(buf.size()), p)) out += buf.data();
  if (pclose(p) != 0) return "";
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}
}  // namespace

nlohmann::ordered_json git_provenance() {
  nlohmann::ordered_json j;
  const std::string src = NIBBLE_SOURCE_DIR;
  const std::string git = "git -C '" + src + "' ";
  const std::string sha = capture(git + "rev-parse HEAD 2>/dev/null");
  j["source_dir"] = src;
  if (const char* env = std::getenv("NIBBLE_SOURCE_COMMIT"); env && *env) {
    // The caller says which commit the tree is (a CI artifact, a copy on a remote GPU machine whose
    // .git, if any, may be stale): that wins, and what git says is kept beside it for comparison.
    j["commit"] = env;
    j["dirty"] = nullptr;
    j["commit_from"] = "NIBBLE_SOURCE_COMMIT";
    if (!sha.empty()) j["git_commit"] = sha;
  } else if (!sha.empty()) {
    j["commit"] = sha;
    j["dirty"] = !capture(git + "status --porcelain --untracked-files=no 2>/dev/null").empty();
    j["commit_from"] = "git";
  } else {
    j["commit"] = nullptr;
    j["commit_from"] = "unknown: no git checkout and NIBBLE_SOURCE_COMMIT unset";
  }
  j["build_commit"] = build_commit();
  return j;
}

nlohmann::ordered_json host_provenance() {
  nlohmann::ordered_json j;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  struct utsname u {};
  uname(&u);
  j["hostname"] = host;
  j["os"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
  j["cpus"] = std::thread::hardware_concurrency();
  return j;
}

const char* build_commit() { return NIBBLE_BUILD_COMMIT; }

nlohmann::ordered_json nibble_environment() {
  std::vector<std::pair<std::string, std::string>> vars;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (kv.rfind("NIBBLE_", 0) == 0 && eq != std::string::npos) vars.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  std::sort(vars.begin(), vars.end());
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [k, v] : vars) j[k] = v;
  return j;
}

}  // namespace nibble
