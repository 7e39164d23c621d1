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

namespace {

/** Every byte of content to fd; false with errno set on an error. */
bool write_all(int fd, const std::string& content) {
  size_t off = 0;
  while (off < content.size()) {
    const ssize_t w = write(fd, content.data() + off, content.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    off += size_t(w);
  }
  return true;
}

}  // namespace

std::string write_target(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(fs::status(path, ec))) {
    const fs::path c = fs::canonical(path, ec);
    if (!ec) return c.string();
  }
  // not there (yet): follow a dangling link on the last component to the file it would create
  fs::path p(path);
  for (int hops = 0; fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
    if (hops == 40) throw std::runtime_error("cannot write " + path + ": too many levels of symbolic links");
    const fs::path next = fs::read_symlink(p, ec);
    if (ec) throw std::runtime_error("cannot write " + path + ": " + ec.message());
    p = next.is_absolute() ? next : p.parent_path() / next;
  }
  const fs::path w = fs::weakly_canonical(p, ec);
  return (ec ? fs::absolute(p) : w).string();
}

void write_file_atomic(const std::string& path, const std::string& content) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) throw std::runtime_error("cannot write a file: the output path is empty; give a file name");
  // What the path names once the kernel has followed every link (also /proc's, e.g. /dev/stdout).
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_directory(st))
    throw std::runtime_error("cannot write " + path + ": it is a folder; give a file name inside it");
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    // A pipe, a terminal or a device (-o /dev/stdout): a rename would replace it with a file that
    // nobody reads, and such a target has no old content to keep, so the bytes go straight in.
    const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("cannot write " + path + ": " + strerror(errno));
    if (!write_all(fd, content)) {
      const std::string why = strerror(errno);
      close(fd);
      throw std::runtime_error("cannot write " + path + ": " + why);
    }
    if (close(fd) != 0) throw std::runtime_error("cannot write " + path + ": " + strerror(errno));
    return;
  }
  // The file that the new content replaces (a link stays a link, as a shell's `>` keeps it).
  const fs::path p = write_target(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  const std::string target = p.string();
  const std::string tmp = target + ".tmp." + std::to_string(getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot write " + path + ": " + strerror(errno));
  if (!write_all(fd, content)) {
    const std::string why = strerror(errno);
    close(fd);
    unlink(tmp.c_str());
    throw std::runtime_error("cannot write " + path + ": " + why);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    const std::string why = strerror(errno);
    unlink(tmp.c_str());
    throw std::runtime_error("cannot write " + path + ": " + why);
  }
  if (rename(tmp.c_str(), target.c_str()) != 0) {
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
