// atomic_file.cpp
#include "harness/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace nibble {

void write_file_atomic(const std::string& path, const std::string& content) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  std::error_code ec;
  if (path.empty()) throw std::runtime_error("cannot write a file: the output path is empty; give a file name");
  if (fs::is_directory(p, ec))
    throw std::runtime_error("cannot write " + path + ": it is a folder; give a file name inside it");
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot write " + path + ": " + strerror(errno));
  size_t off = 0;
  while (off < content.size()) {
    const ssize_t w = write(fd, content.data() + off, content.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      const std::string why = strerror(errno);
      close(fd);
      unlink(tmp.c_str());
      throw std::runtime_error("cannot write " + path + ": " + why);
    }
    off += size_t(w);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    const std::string why = strerror(errno);
    unlink(tmp.c_str());
    throw std::runtime_error("cannot write " + path + ": " + why);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = strerror(errno);
    unlink(tmp.c_str());
    throw std::runtime_error("cannot write " + path + " (renaming the finished temporary file onto it): " + why);
  }
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path + ": " + strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace nibble
