// protocol.cpp: see protocol.h.
#include "harness/protocol.h"

#include "fixtures/safetensors.h"  // parse_json_bounded

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace nibble {

Result parse_child_result(const std::string& text) {
  return parse_json_bounded(text.data(), text.data() + text.size(), "the child's result").get<Result>();
}

int make_channel(const std::string& name) {
  const int fd = memfd_create(("nibble-" + name).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) throw std::runtime_error("memfd_create(" + name + "): " + std::strerror(errno));
  return fd;
}

std::string read_channel(int fd, size_t max_bytes) {
  struct stat st {};
  if (fstat(fd, &st) != 0) throw std::runtime_error(std::string("fstat of a child's channel: ") + std::strerror(errno));
  if (size_t(st.st_size) > max_bytes)
    throw std::runtime_error("a child's channel holds " + std::to_string(st.st_size) + " bytes, more than the " +
                             std::to_string(max_bytes) + " it may");
  std::string out;
  char buf[1 << 16];
  off_t off = 0;
  for (;;) {
    const ssize_t n = pread(fd, buf, sizeof buf, off);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("reading a child's channel: ") + std::strerror(errno));
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
    off += n;
  }
  return out;
}

void seal_channel(int fd) {
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    throw std::runtime_error(std::string("sealing a channel: ") + std::strerror(errno));
}

void write_channel(int fd, const std::string& data) {
  if (ftruncate(fd, 0) != 0) throw std::runtime_error(std::string("ftruncate of a channel: ") + std::strerror(errno));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = pwrite(fd, data.data() + done, data.size() - done, off_t(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("writing a channel: ") + std::strerror(errno));
    }
    done += size_t(n);
  }
}

}  // namespace nibble
