// atomic_file.cpp
#include "harness/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
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

int standard_stream_fd(const std::string& path) {
  if (path == "/dev/stdout") return STDOUT_FILENO;
  if (path == "/dev/stderr") return STDERR_FILENO;
  for (const char* prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    const std::string pre(prefix);
    if (path.size() > pre.size() && path.compare(0, pre.size(), pre) == 0 &&
        path.find_first_not_of("0123456789", pre.size()) == std::string::npos && path.size() - pre.size() <= 9)
      return std::stoi(path.substr(pre.size()));
  }
  return -1;
}

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
  // Absolute first: weakly_canonical keeps a relative path relative when none of it exists yet, and
  // then "a.json" and "$PWD/a.json" would not compare equal (same_output_file).
  const fs::path a = fs::absolute(p, ec);
  const fs::path w = fs::weakly_canonical(ec ? p : a, ec);
  return (ec ? a : w).string();
}

bool same_output_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  try {
    return write_target(a) == write_target(b);
  } catch (const std::exception&) {
    return false;  // a loop of links: the write's own check refuses it
  }
}

void check_output_name(const std::string& path) {
  if (path.empty()) throw std::runtime_error("cannot write a file: the output path is empty; give a file name");
  // Not the shell convention for standard output here: a file named '-' would be created.
  if (path == "-") throw std::runtime_error("cannot write '-': for standard output give /dev/stdout, for a file named '-' give ./-");
  if (path.back() == '/')
    throw std::runtime_error("cannot write " + path + ": it names a folder (it ends in '/'); give a file name inside it");
  if (std::filesystem::is_directory(path))
    throw std::runtime_error("cannot write " + path + ": it is a folder; give a file name inside it");
}

void write_file_atomic(const std::string& path, const std::string& content) {
  namespace fs = std::filesystem;
  std::error_code ec;
  check_output_name(path);
  if (const int sfd = standard_stream_fd(path); sfd >= 0) {
    // -o /dev/stdout: into the stream itself, as a shell's redirection set it up (`>> log` appends,
    // `( ... ) > f` keeps what follows); opening the path anew would start a regular file over at
    // offset 0, and a rename would replace it.
    if (!write_all(sfd, content)) {
      const std::string why = "cannot write " + path + ": " + strerror(errno);
      if (sfd == STDOUT_FILENO) throw StdoutLost(why);
      throw std::runtime_error(why);
    }
    return;
  }
  // What the path names once the kernel has followed every link.
  const fs::file_status st = fs::status(path, ec);
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    // A pipe, a terminal or a device: a rename would replace it with a file that nobody reads, and
    // such a target has no old content to keep, so the bytes go straight in (a pipe without a
    // reader blocks until one comes, as a shell's `> pipe` does).
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
  // The file that the new content replaces (a link stays a link, as a shell's `>` keeps it). Its
  // permissions carry over; a hard link to the old file keeps the old content (a new inode is
  // what makes the replacement atomic).
  const fs::path p = write_target(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  const std::string target = p.string();
  struct stat old {};
  const bool had = ::stat(target.c_str(), &old) == 0;
  // A short name beside the target (the target's own name plus a suffix could pass NAME_MAX), unique
  // per process and call (batch threads write at once).
  static std::atomic<unsigned> serial{0};
  const std::string tmp = (p.has_parent_path() ? p.parent_path() / "" : fs::path()).string() + ".nibble-" +
                          std::to_string(getpid()) + "-" + std::to_string(serial++) + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot write " + path + ": " + strerror(errno));
  if (had) (void)fchmod(fd, old.st_mode & 07777);  // best effort: the content matters more
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
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) throw std::runtime_error("cannot read " + path + ": " + strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw std::runtime_error("cannot read " + path + ": " + (S_ISDIR(st.st_mode) ? "it is a folder" : "it is not a regular file (a pipe or a device?)") +
                             ": give the path of a file nibble wrote");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path + ": " + strerror(errno));
  std::string out;
  char buf[1 << 16];
  while (f.read(buf, sizeof buf) || f.gcount() > 0) {
    out.append(buf, size_t(f.gcount()));
    if (out.size() > kMaxReadFileBytes)
      throw std::runtime_error("cannot read " + path + ": larger than " + std::to_string(kMaxReadFileBytes >> 20) +
                               " MiB, which no file nibble writes is");
  }
  return out;
}

}  // namespace nibble
