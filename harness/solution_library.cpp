// solution_library.cpp: dlopen a solution and resolve its decode entry points.
#include "harness/solution_library.h"

#include <dlfcn.h>
#include <elf.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>

namespace nibble {

namespace {
/** A solution's self-description as printable ASCII, at most 256 characters: it ends up in JSON
 *  reports and safetensors headers, which need valid UTF-8. */
std::string printable(const char* s) {
  std::string out;
  for (size_t i = 0; s[i] && out.size() < 256; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    out += (c >= 0x20 && c < 0x7f) ? char(c) : '?';
  }
  return out;
}

/** What is missing where `path` (`size` bytes) is an ELF64 file cut short: its header, its program or
 *  section header table, or a loadable segment's bytes past the end; "" otherwise, or where it is
 *  not ELF64 (dlopen then says why). The loader maps such a file and dies of SIGBUS touching the
 *  missing pages, which read as the solution's own code crashing (a newcomer's truncated copy was
 *  predicted Crashed). Layout: the System V ABI's ELF-64 object file format (elf.h). */
std::string elf_cut_short(const std::string& path, uint64_t size) {
  std::ifstream f(path, std::ios::binary);
  char ident[EI_NIDENT] = {};
  if (!f.read(ident, EI_NIDENT) || std::memcmp(ident, ELFMAG, SELFMAG) != 0 || ident[EI_CLASS] != ELFCLASS64) {
    if (size >= SELFMAG && size < EI_NIDENT && std::memcmp(ident, ELFMAG, SELFMAG) == 0)
      return "the file ends inside its ELF header (" + std::to_string(size) + " bytes)";
    return "";
  }
  const auto need = [&](uint64_t end, const std::string& what) -> std::string {
    return end > size ? what + " ends at byte " + std::to_string(end) + ", the file has " + std::to_string(size) : "";
  };
  if (size < sizeof(Elf64_Ehdr)) return need(sizeof(Elf64_Ehdr), "its ELF header");
  Elf64_Ehdr eh{};
  f.seekg(0);
  if (!f.read(reinterpret_cast<char*>(&eh), sizeof eh)) return "";
  if (std::string w = need(eh.e_phoff + uint64_t(eh.e_phnum) * eh.e_phentsize, "its program header table"); !w.empty()) return w;
  if (eh.e_shnum > 0)
    if (std::string w = need(eh.e_shoff + uint64_t(eh.e_shnum) * eh.e_shentsize, "its section header table"); !w.empty()) return w;
  if (eh.e_phentsize < sizeof(Elf64_Phdr)) return "";
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    f.seekg(std::streamoff(eh.e_phoff + uint64_t(i) * eh.e_phentsize));
    if (!f.read(reinterpret_cast<char*>(&ph), sizeof ph)) return "";
    if (ph.p_type == PT_LOAD)
      if (std::string w = need(ph.p_offset + ph.p_filesz, "its loadable segment " + std::to_string(i)); !w.empty()) return w;
  }
  return "";
}
}  // namespace

SolutionLibrary::SolutionLibrary(const std::string& path, Abi abi) : path_(path), abi_(abi) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    throw LoadError(LoadError::NotFound, "solution '" + path + "' does not exist; pass the path of a built .so");
  if (const std::string cut = elf_cut_short(path, uint64_t(st.st_size)); !cut.empty())
    throw LoadError(LoadError::NotLoadable, "solution '" + path + "' is cut short: " + cut +
                                                " (a partial copy or an interrupted build); build it again or copy it whole");
  // A path without a slash would make dlopen search the library path instead of this file.
  const std::string open_path = path.find('/') == std::string::npos ? "./" + path : path;
  handle_ = dlopen(open_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* why = dlerror();
    throw LoadError(LoadError::NotLoadable, "cannot load solution '" + path + "': " + (why ? why : "unknown") +
                                                "; is it a shared object built for this machine?");
  }
  // A library of the other ABI says so: its missing entry point alone reads like a broken build.
  const auto other_abi = [&]() -> std::string {
    if (abi == Abi::Decode && dlsym(handle_, "nibble_gemm_abi_version"))
      return "; it exports the GEMM ABI (nibble_gemm_abi_version)";
    if (abi == Abi::Gemm && dlsym(handle_, "nibble_decode_build_model"))
      return "; it exports the decode ABI (nibble_decode_build_model)";
    return "";
  };
  auto sym = [&](const char* name, bool required) -> void* {
    dlerror();
    void* p = dlsym(handle_, name);
    if (!p && required) {
      const std::string other = other_abi();
      throw LoadError(LoadError::MissingSymbol,
                      "solution '" + path + "' does not export '" + name + "' (extern \"C\", see " +
                          (abi == Abi::Decode ? "include/nibble/nibble.h" : "include/nibble/nibble_gemm.h") + ")" + other,
                      !other.empty());
    }
    return p;
  };
  try {
    auto version = reinterpret_cast<nibble_abi_version_fn>(sym("nibble_abi_version", true));
    const int32_t v = version();
    if (v != NIBBLE_ABI_VERSION)
      throw LoadError(LoadError::AbiMismatch, "solution '" + path + "' was built against nibble ABI version " +
                                                  std::to_string(v) + "; this grader speaks version " +
                                                  std::to_string(NIBBLE_ABI_VERSION) + ": rebuild it against this include/nibble/nibble.h");
    if (abi == Abi::Decode) {
      build_model = reinterpret_cast<nibble_decode_build_model_fn>(sym("nibble_decode_build_model", true));
      decode_step = reinterpret_cast<nibble_decode_step_fn>(sym("nibble_decode_step", true));
      teardown = reinterpret_cast<nibble_decode_teardown_fn>(sym("nibble_decode_teardown", true));
    } else {
      auto gv = reinterpret_cast<nibble_gemm_abi_version_fn>(sym("nibble_gemm_abi_version", true));
      if (gv() != NIBBLE_GEMM_ABI_VERSION)
        throw LoadError(LoadError::AbiMismatch, "solution '" + path + "' was built against nibble GEMM ABI version " +
                                                    std::to_string(gv()) + "; this grader speaks version " +
                                                    std::to_string(NIBBLE_GEMM_ABI_VERSION) +
                                                    ": rebuild it against this include/nibble/nibble_gemm.h");
      gemm_prepare = reinterpret_cast<nibble_gemm_prepare_fn>(sym("nibble_gemm_prepare", true));
      gemm_run = reinterpret_cast<nibble_gemm_run_fn>(sym("nibble_gemm_run", true));
      gemm_teardown = reinterpret_cast<nibble_gemm_teardown_fn>(sym("nibble_gemm_teardown", true));
    }
    refresh();
  } catch (...) {
    dlclose(handle_);
    handle_ = nullptr;
    throw;
  }
}

void SolutionLibrary::refresh() {
  if (abi_ == Abi::Gemm) {
    if (auto od = reinterpret_cast<nibble_gemm_output_dtype_fn>(optional_symbol("nibble_gemm_output_dtype"))) {
      gemm_output_dtype = od();
      if (gemm_output_dtype != NIBBLE_GEMM_OUTPUT_F32 && gemm_output_dtype != NIBBLE_GEMM_OUTPUT_BF16)
        throw LoadError(LoadError::NotLoadable, "solution '" + path_ + "': nibble_gemm_output_dtype() returned " +
                                                    std::to_string(gemm_output_dtype) + ", not F32 (0) or BF16 (1)");
    }
    if (auto il = reinterpret_cast<nibble_gemm_int4_layout_fn>(optional_symbol("nibble_gemm_int4_layout"))) {
      gemm_int4_layout = il();
      if (gemm_int4_layout < NIBBLE_INT4_LAYOUT_PLAIN || gemm_int4_layout > NIBBLE_INT4_LAYOUT_COMPRESSED_TENSORS)
        throw LoadError(LoadError::NotLoadable, "solution '" + path_ + "': nibble_gemm_int4_layout() returned " +
                                                    std::to_string(gemm_int4_layout) +
                                                    ", not one of PLAIN (0), AWQ (1), GPTQ (2), GPTQ_G_IDX (3), "
                                                    "COMPRESSED_TENSORS (4) (include/nibble/nibble_gemm.h)");
    }
  }
  auto name_fn = reinterpret_cast<nibble_solution_name_fn>(optional_symbol("nibble_solution_name"));
  const char* n = name_fn ? name_fn() : nullptr;
  name_ = printable(n ? n : path_.substr(path_.find_last_of('/') + 1).c_str());
  auto numerics_fn = reinterpret_cast<nibble_solution_name_fn>(optional_symbol("nibble_reference_numerics"));
  const char* num = numerics_fn ? numerics_fn() : nullptr;
  numerics_ = num ? printable(num) : "";
}

void* SolutionLibrary::optional_symbol(const char* name) const { return handle_ ? dlsym(handle_, name) : nullptr; }

SolutionLibrary::~SolutionLibrary() {
  // Never dlclose a library whose kernels may still be registered with the CUDA runtime: the
  // process is about to exit anyway, and unloading a module mid-teardown has crashed drivers.
}

const char* status_name(nibble_status s) {
  switch (s) {
    case NIBBLE_OK: return "OK";
    case NIBBLE_ERR_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case NIBBLE_ERR_NOT_SUPPORTED: return "NOT_SUPPORTED";
    case NIBBLE_ERR_CUDA: return "CUDA";
    case NIBBLE_ERR_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
    case NIBBLE_ERR_INTERNAL: return "INTERNAL";
  }
  return "unknown status";
}

void check_status(nibble_status s, const nibble_error& err, const char* call) {
  if (s == NIBBLE_OK) return;
  const std::string msg(err.message, strnlen(err.message, sizeof(err.message)));
  throw SolutionError(s, std::string(call) + " returned " + status_name(s) + (msg.empty() ? "" : ": " + msg));
}

}  // namespace nibble
