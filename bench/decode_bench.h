// decode_bench.h: what the bench/ programs that run a decode solution share: the grader's cached
// fixture of a decode config (seed 0), built there when missing, and a bundled solution's library in
// this build.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "fixtures/decode/decode_config.h"
#include "fixtures/decode/decode_fixture.h"
#include "fixtures/fixture.h"
#include "fixtures/safetensors.h"

namespace nibble {

/** The grader's cached fixture of cfg, seed 0 (default_fixture_dir, $NIBBLE_CACHE_DIR), built there
 *  when missing (~6 s on 16 cores for full, 2 GB), opened once per process (one config per process:
 *  a second config is std::logic_error). */
inline const SafetensorsFile& cached_decode_fixture(const DecodeConfig& cfg) {
  static std::string name = cfg.name;
  if (cfg.name != name) throw std::logic_error("cached_decode_fixture: one config per process (" + name + " opened)");
  static std::unique_ptr<SafetensorsFile> file = [&] {
    const std::string dir = default_fixture_dir(kDecodeTask, cfg.name, 0);
    std::filesystem::create_directories(dir);
    {
      const FolderLock lock(dir);
      if (!fixture_present(dir, kDecodeTask, cfg.name, 0, /*given=*/false)) build_decode_fixture(cfg, 0, dir, 0, {});
    }
    return std::make_unique<SafetensorsFile>(dir + "/" + kFixtureModelFile);
  }();
  return *file;
}

/** lib/libnibble_<name>.so of the build this program was built in ($NIBBLE_BINARY_DIR: another). */
inline std::string bench_solution_path(const std::string& name) {
  const char* bin = std::getenv("NIBBLE_BINARY_DIR");
  return std::string(bin && *bin ? bin : NIBBLE_BENCH_BINARY_DIR) + "/lib/libnibble_" + name + ".so";
}

}  // namespace nibble
