// atomic_file.h: write a file so that a reader sees the old content or the new, never a torn one.
#pragma once

#include <string>

namespace nibble {

/** Write `content` to `path` via a temp file in the same folder, fsync, rename. Creates missing
 *  parent folders. A symbolic link is written through (its target gets the file, the link stays);
 *  a pipe, terminal or device (e.g. /dev/stdout) is written into directly, not atomically (a
 *  rename would replace it). Throws std::runtime_error naming the path and the OS error. */
void write_file_atomic(const std::string& path, const std::string& content);

/** The file write_file_atomic(path) replaces or creates, absolute: a link's resolved target, the
 *  file a dangling link names, or the path itself (normalised). Throws on a loop of links. */
std::string write_target(const std::string& path);

/** Read a whole file; throws std::runtime_error naming the path when it cannot. */
std::string read_file(const std::string& path);

}  // namespace nibble
