// gemm_fixture_tool.cpp: a minimal CLI over the GEMM fixture builder, for
// tests/python/check_gemm_fixture.py (and for timing a large build). The user-facing command will be
// `nibble fixture build --task gemm-... --config ...` once the harness knows the GEMM tasks.
//
//   gemm_fixture_tool config <task> <config>                        the config as JSON
//   gemm_fixture_tool build <task> <config> <seed> <dir> [threads]  build, print the manifest JSON
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#include "fixtures/gemm_fp4/gemm_fixture.h"

namespace {

int usage() {
  std::cerr << "usage: gemm_fixture_tool config <task> <config>\n"
               "       gemm_fixture_tool build <task> <config> <seed> <dir> [threads]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 4) return usage();
    const std::string cmd = argv[1];
    const nibble::GemmConfig cfg = nibble::gemm_config(argv[2], argv[3]);
    if (cmd == "config" && argc == 4) {
      nlohmann::ordered_json j = {{"task", cfg.task},
                                  {"config", cfg.name},
                                  {"generator_version", nibble::kGeneratorVersion},
                                  {"M", cfg.M},
                                  {"N", cfg.N},
                                  {"K", cfg.K},
                                  {"block", cfg.block},
                                  {"scale_cols", cfg.scale_cols()},
                                  {"bytes_per_call", cfg.bytes_per_call()},
                                  {"flops", cfg.flops()}};
      std::cout << j.dump(2) << "\n";
      return 0;
    }
    if (cmd == "build" && (argc == 6 || argc == 7)) {
      const uint64_t seed = std::stoull(argv[4]);
      const int threads = argc == 7 ? std::atoi(argv[6]) : 0;
      const auto m = nibble::build_gemm_fixture(cfg, seed, argv[5], threads, nullptr);
      std::cerr << "built " << argv[5] << " in " << m.build_seconds << " s on " << m.threads << " threads\n";
      std::cout << nibble::manifest_to_json(m).dump(2) << "\n";
      return 0;
    }
    return usage();
  } catch (const std::exception& e) {
    std::cerr << "gemm_fixture_tool: " << e.what() << "\n";
    return 1;
  }
}
