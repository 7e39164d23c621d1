// fuzz_safetensors.cpp: libFuzzer target for the fixture readers (issue 4, item 7).
//
// What it feeds: SafetensorsFile (the mmap reader of fixtures/safetensors.h) and read_manifest +
// verify_fixture (fixtures/fixture.h), the code that opens whatever a user points --fixture at.
// The product is not changed for the fuzzer: the input is written to real files in a private
// temporary folder and read back through the public API, exactly as the grader reads them.
//
// Input format: if the bytes contain the separator line "\n--8<--\n", the part before it is
// manifest.json and the part after it is model.safetensors (so one input can drive verify_fixture
// with a manifest that describes the file); otherwise the whole input is written to both files.
//
// A reader may refuse an input only by throwing an exception derived from std::exception; anything
// else (a crash, an ASan report, an entry whose bytes lie outside the file, a hang) is a bug.
//
// Build and run (clang with libFuzzer; see tests/fuzz/README.md):
//   cmake -S tests/fuzz -B build-fuzz -DCMAKE_CXX_COMPILER=clang++-14 && cmake --build build-fuzz -j2
//   build-fuzz/fuzz_safetensors -max_total_time=300 build-fuzz/corpus-work tests/fuzz/corpus
// The same file, compiled without libFuzzer (fuzz_replay_main.cpp), replays tests/fuzz/corpus in
// CI as the CTest nibble.test.fuzz_corpus.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <string>
#include <string_view>

#include "fixtures/fixture.h"
#include "fixtures/safetensors.h"

namespace {

volatile uint64_t g_sink;

/** One private folder per process, removed at exit (the string is never freed, so the exit
 *  handler can still read it after static destructors ran). */
const std::string& work_dir() {
  static const std::string* dir = [] {
    const char* base = std::getenv("TMPDIR");
    auto* d = new std::string(std::string(base && *base ? base : "/tmp") + "/nibble-fuzz-XXXXXX");
    if (!mkdtemp(d->data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    std::atexit([] {
      const std::string& w = work_dir();
      std::remove((w + "/model.safetensors").c_str());
      std::remove((w + "/manifest.json").c_str());
      rmdir(w.c_str());
    });
    return d;
  }();
  return *dir;
}

void write_bytes(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

/** A violated invariant of an accepted file: a bug even though nothing crashed. */
[[noreturn]] void invariant(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz: invariant violated: %s (%s)\n", what, detail.c_str());
  std::abort();
}

void check_safetensors(const std::string& path) {
  nibble::SafetensorsFile f(path);
  const uint8_t* begin = f.file_bytes();
  const uint8_t* end = begin + f.file_size();
  uint64_t sum = 0;
  for (const auto& e : f.entries()) {
    const uint8_t* p = f.data(e.name);
    // Every accepted tensor lies inside the mapped file: mmap'd memory is not ASan-poisoned, so
    // an out-of-range entry would read a neighbouring page silently; check it explicitly.
    if (p < begin || p > end || e.nbytes() > size_t(end - p)) invariant("tensor bytes outside the file", e.name);
    if (!f.has(e.name) || &f.entry(e.name) != &e) invariant("index does not find the entry", e.name);
    for (size_t i = 0; i < e.nbytes(); i += 4096) sum += p[i];
    if (e.nbytes()) sum += p[e.nbytes() - 1];
  }
  for (const auto& [k, v] : f.metadata()) sum += k.size() + v.size();
  g_sink = sum;  // keeps the reads
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  static constexpr std::string_view kSep = "\n--8<--\n";
  const size_t cut = in.find(kSep);
  const std::string_view manifest = cut == std::string_view::npos ? in : in.substr(0, cut);
  const std::string_view model = cut == std::string_view::npos ? in : in.substr(cut + kSep.size());

  const std::string dir = work_dir();
  write_bytes(dir + "/model.safetensors", model);
  write_bytes(dir + "/manifest.json", manifest);

  try {
    check_safetensors(dir + "/model.safetensors");
  } catch (const std::exception&) {
    // Refused with a message: the expected outcome for most inputs.
  }
  try {
    const nibble::FixtureManifest m = nibble::read_manifest(dir);
    // read_manifest promises the fixture's one file name; verify_fixture opens <dir>/<file>.
    if (m.file != "model.safetensors") invariant("read_manifest accepted a file other than model.safetensors", m.file);
    (void)nibble::manifest_to_json(m).dump();
    if (m.file == "model.safetensors") nibble::verify_fixture(dir, m);
  } catch (const std::exception&) {
  }
  return 0;
}
