// atomic_file.h: write a file so that a reader sees the old content or the new, never a torn one.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace nibble {

/** Write `content` to `path` via a temp file in the same folder, fsync, rename. Creates missing
 *  parent folders. A symbolic link is written through (its target gets the file, the link stays;
 *  the old file's permissions are kept, a hard link to it keeps the old content); /dev/stdout,
 *  /dev/stderr, /dev/fd/N and /proc/self/fd/N go to that file descriptor as it is (a shell's `>>`
 *  appends); another pipe, terminal or device is opened and written into, not atomically (a rename
 *  would replace it; a pipe without a reader blocks). Throws std::runtime_error naming the path and
 *  the OS error (also for a path that ends in '/', or is a folder, or is empty). */
void write_file_atomic(const std::string& path, const std::string& content);
/** What write_file_atomic throws when the file was this process's standard output (/dev/stdout,
 *  /dev/fd/1, /proc/self/fd/1) and it could not be written: the CLI's exit 74 (kExitStdoutLost). */
struct StdoutLost : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/** The file descriptor a path names by itself: 1 for /dev/stdout, 2 for /dev/stderr, N for
 *  /dev/fd/N and /proc/self/fd/N; -1 for any other path. */
int standard_stream_fd(const std::string& path);

/** Throws std::runtime_error unless `path` could name a file to write: not empty, not '-' (which
 *  users mean as standard output: /dev/stdout is that), not ending in '/', not a folder
 *  (write_file_atomic's first checks, for checks made before the work). */
void check_output_name(const std::string& path);

/** The file write_file_atomic(path) replaces or creates, absolute: a link's resolved target, the
 *  file a dangling link names, or the path itself (normalised). Throws on a loop of links. */
std::string write_target(const std::string& path);

/** Whether two paths name the same file once written: the same existing file (hard links too), or
 *  the same file write_file_atomic would create (links, dangling ones too, followed). */
bool same_output_file(const std::string& a, const std::string& b);

/** The most read_file reads: nibble's reports, manifests and tables are kilobytes to megabytes. */
inline constexpr uint64_t kMaxReadFileBytes = uint64_t(256) << 20;

/** Read a whole regular file of at most kMaxReadFileBytes; throws std::runtime_error naming the
 *  path when it cannot, when it is no regular file (a pipe, a device: reading one could wait
 *  forever or never end) or when it is larger. */
std::string read_file(const std::string& path);

}  // namespace nibble
