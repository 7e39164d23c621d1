// landlock_probe.cpp: which Landlock rule the CUDA driver needs on this machine. Usage:
//   landlock_probe [scope] [ro:PATH | rw:PATH]...   -> applies a ruleset handling every filesystem
// right (and, with "scope", signal scoping), allows exactly the given paths, then cudaFree(0).
// Built and run by diag-landlock.sh on the GPU machine (nvcc landlock_probe.cpp -lcudart).
#include <cuda_runtime.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  const long abi = syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  struct { uint64_t fs, net, scoped; } attr{};
  attr.fs = (1ull << 13) - 1;  // ABI 1 rights
  if (abi >= 2) attr.fs |= (1ull << 13);
  if (abi >= 3) attr.fs |= (1ull << 14);
  bool scope = argc > 1 && std::string(argv[1]) == "scope";
  if (scope && abi >= 6) attr.scoped = 2;  // LANDLOCK_SCOPE_SIGNAL
  const int rs = int(syscall(SYS_landlock_create_ruleset, &attr, abi >= 6 ? 24 : 16, 0));
  if (rs < 0) { std::printf("create: %s\n", strerror(errno)); return 2; }
  const uint64_t ro_file = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_EXECUTE;
  for (int i = scope ? 2 : 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool rw = a.rfind("rw:", 0) == 0;
    const std::string path = a.substr(3);
    const int fd = open(path.c_str(), O_PATH | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st{};
    fstat(fd, &st);
    uint64_t allowed = rw ? attr.fs : S_ISDIR(st.st_mode) ? ro_file | LANDLOCK_ACCESS_FS_READ_DIR : ro_file;
    if (!S_ISDIR(st.st_mode)) allowed &= LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | (1ull << 14);
    struct landlock_path_beneath_attr r{};
    r.allowed_access = allowed;
    r.parent_fd = fd;
    if (syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &r, 0) != 0) std::printf("rule %s: %s\n", a.c_str(), strerror(errno));
    close(fd);
  }
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  if (syscall(SYS_landlock_restrict_self, rs, 0) != 0) { std::printf("restrict: %s\n", strerror(errno)); return 2; }
  const cudaError_t e = cudaFree(nullptr);
  std::printf("abi %ld%s: cudaFree(0) -> %s\n", abi, scope ? " +scope" : "", cudaGetErrorName(e));
  return e == cudaSuccess ? 0 : 1;
}
