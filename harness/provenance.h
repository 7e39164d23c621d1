// provenance.h: how a report was made (after nvbench's json_printer): git commit and dirty flag
// of the source tree, the host. The GPU's facts come from the probe child.
#pragma once

#include <nlohmann/json.hpp>

namespace nibble {

/** {"commit": sha or null, "dirty": bool or null, "commit_from", "source_dir", "build_commit": sha at
 *  build time}. NIBBLE_SOURCE_COMMIT, when set, is the commit (a copied tree's .git may be
 *  stale; git's answer is kept as "git_commit"); else git in the source folder at run time. */
nlohmann::ordered_json git_provenance();

/** The commit HEAD was at when these binaries were last built (every build checks it:
 *  cmake/build_commit.cmake), "<sha>-dirty" when tracked files had uncommitted changes then, or
 *  "unknown" without git. */
const char* build_commit();
/** Every NIBBLE_* variable of this process's environment, name -> value: the switches of nibble and
 *  of its solutions (NIBBLE_DF_WARPS, NIBBLE_FP4SM90_TAIL, ...), which the children inherit, so a
 *  report says what its solution ran with. */
nlohmann::ordered_json nibble_environment();
/** {"hostname", "os", "cpus"}. */
nlohmann::ordered_json host_provenance();

}  // namespace nibble
