// decode_import.h: `nibble fixture import`: a decode-task fixture from a real int4 checkpoint
// (fixtures/decode/checkpoint_import.h reads and converts it) and real token ids, whose KV prefix
// is computed by running the model over the first `prefill` ids, so that the logits a grade checks
// are a real model's continuation.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "fixtures/fixture.h"

namespace nibble {

struct ImportOptions {
  std::string format;     // awq | gptq | compressed-tensors
  std::string checkpoint; // the folder
  std::string tokens;     // file of token ids: prefill + decode_steps of them are used
  std::string out;        // the fixture folder to write
  std::string config;     // "" = the decode config the checkpoint's dimensions match
  /** How the KV prefix is computed: "cpu" (the fp64 oracle, bf16 cache as the task defines it),
   *  "gpu" (the bundled fp32 cuBLAS reference .so, in this process), "auto" (gpu when one answers). */
  std::string path = "auto";
  std::string reference;  // the decode reference .so for "gpu"
  int threads = 0;
};

/** Most fp64 multiply-adds the CPU path runs before it refuses (tiny: ~1e8; full: ~7e12, days). */
constexpr double kImportCpuMaxMacs = 2e10;

/**
 * Import: read the checkpoint, take the token ids (prefill for the KV prefix, decode_steps for the
 * fixture's `tokens`), run the model over the prefix (slots 0 .. prefill-1), write <out>/
 * model.safetensors and manifest.json (seed 0, its "source" saying what was imported, its SHA-256s,
 * the token file's, how the prefix was computed, what is exact and what rounded).
 * @throws std::invalid_argument for a refused checkpoint, too few or out-of-range ids, a CPU path
 *         over kImportCpuMaxMacs; std::runtime_error for I/O and the GPU path's failures
 */
FixtureManifest import_decode_fixture(const ImportOptions& opt, const std::function<void(const std::string&)>& log);

}  // namespace nibble
