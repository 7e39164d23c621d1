// protocol.cpp: see protocol.h.
#include "harness/protocol.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace nibble {

int make_channel(const std::string& name) {
  const int fd = memfd_create(("nibble-" + name).c_str(), MFD_CLOEXEC);
  if (fd < 0) throw std::runtime_error("memfd_create(" + name + "): " + std::strerror(errno));
  return fd;
}

std::string read_channel(int fd) {
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
