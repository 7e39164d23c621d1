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
 *  cmake/build_commit.cmake), or "unknown" without git; uncommitted changes are not in it (the
 *  report's git.dirty says whether the tree had any when it ran). */
const char* build_commit();
/** {"hostname", "os", "cpus"}. */
nlohmann::ordered_json host_provenance();

}  // namespace nibble
