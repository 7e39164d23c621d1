// anchors.h: what `nibble report html` sets a report against that the report does not carry: its
// task specification's drop-the-feature points (Task supplies them). Times are never typed in: the
// page draws other graded reports beside it (--beside, harness/lineup.h).
#pragma once

#include <string>

namespace nibble {

/** A point on the error axis: a variant's worst relative error. */
struct ErrorAnchor {
  std::string name;
  double worst_rel_err;
  bool must_pass;  // a legitimate precision variant (true) or a mutant the gate must reject
};

}  // namespace nibble
