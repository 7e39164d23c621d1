// fixture_tool.cpp: a minimal CLI over nibble_fixtures for tests/python/check_fixture.py (and for
// timing a full build). The user-facing command is `nibble fixture build`; this one exists so the
// fixture tests need nothing but this library.
//
//   fixture_tool config <config>                         the config's dims as JSON
//   fixture_tool build <config> <seed> <dir> [threads]   build, print the manifest JSON
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#include "fixtures/decode/decode_fixture.h"
#include "fixtures/fixture.h"

namespace {

int usage() {
  std::cerr << "usage: fixture_tool config <config>\n"
               "       fixture_tool build <config> <seed> <dir> [threads]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 3) return usage();
    const std::string cmd = argv[1];
    const nibble::DecodeConfig cfg = nibble::decode_config(argv[2]);
    if (cmd == "config" && argc == 3) {
      const auto& c = cfg.dims;
      nlohmann::ordered_json j = {{"task", nibble::kDecodeTask}, {"config", cfg.name},
                                  {"generator_version", nibble::kGeneratorVersion},
                                  {"layers", c.layers}, {"d", c.d}, {"ffn", c.ffn}, {"n_q", c.n_q},
                                  {"n_kv", c.n_kv}, {"hd", c.hd}, {"vocab", c.vocab},
                                  {"group", c.group}, {"batch", c.batch}, {"max_seq", c.max_seq},
                                  {"prefill", cfg.prefill}, {"decode_steps", cfg.decode_steps}};
      std::cout << j.dump(2) << "\n";
      return 0;
    }
    if (cmd == "build" && (argc == 5 || argc == 6)) {
      const uint64_t seed = std::stoull(argv[3]);
      const int threads = argc == 6 ? std::atoi(argv[5]) : 0;
      // One line per phase with its duration; the percentage is rewritten in place.
      std::string last;
      auto t_phase = std::chrono::steady_clock::now();
      auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_phase).count(); };
      const auto m = nibble::build_decode_fixture(cfg, seed, argv[4], threads,
                                                  [&](const std::string& phase, double f) {
                                                    if (phase != last) {
                                                      if (!last.empty()) std::fprintf(stderr, " (%.2f s)\n", since());
                                                      last = phase;
                                                      t_phase = std::chrono::steady_clock::now();
                                                    }
                                                    std::fprintf(stderr, "\r%-8s %3.0f%%", phase.c_str(), 100 * f);
                                                  });
      std::fprintf(stderr, " (%.2f s)\n", since());
      std::cerr << "built " << argv[4] << " in " << m.build_seconds << " s on " << m.threads << " threads\n";
      std::cout << nibble::manifest_to_json(m).dump(2) << "\n";
      return 0;
    }
    return usage();
  } catch (const std::exception& e) {
    std::cerr << "fixture_tool: " << e.what() << "\n";
    return 1;
  }
}
