// anchors.h: what `nibble report html` sets a report against that the report does not carry: a
// task's external timings and its specification's drop-the-feature points (Task supplies them).
#pragma once

#include <string>

namespace nibble {

/** A time measured outside the harness for the same work on one GPU, us. */
struct TimeAnchor {
  std::string name;
  double us;
};

/** A point on the error axis: a variant's worst relative error. */
struct ErrorAnchor {
  std::string name;
  double worst_rel_err;
  bool must_pass;  // a legitimate precision variant (true) or a mutant the gate must reject
};

}  // namespace nibble
