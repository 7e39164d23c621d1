// test_env.h: setting the environment a solution's prepare reads (its A/B switches) from a test.
#pragma once

#include <cstdlib>
#include <string>

namespace nibble::test {

/** name = value, or name unset when value is empty; false when setenv fails. */
inline bool set_or_unset_env(const std::string& name, const char* value) {
  if (value && *value) return setenv(name.c_str(), value, 1) == 0;
  return unsetenv(name.c_str()) == 0;
}

}  // namespace nibble::test
