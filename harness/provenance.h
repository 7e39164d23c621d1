// provenance.h: how a report was made (after nvbench's json_printer): git commit and dirty flag
// of the source tree, the host. The GPU's facts come from the probe child.
#pragma once

#include <nlohmann/json.hpp>

namespace nibble {

/** {"commit": sha or null, "dirty": bool, "source_dir": ..., "build_commit": sha at configure time}.
 *  Asks git in the source folder at run time; falls back to the configure-time commit. */
nlohmann::ordered_json git_provenance();
/** {"hostname", "os", "cpus"}. */
nlohmann::ordered_json host_provenance();

}  // namespace nibble
