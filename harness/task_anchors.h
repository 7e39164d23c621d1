// task_anchors.h: what `nibble report html` draws beside a report that the report itself does not
// carry, per task: the task's drop-the-feature points.
// Kept out of the renderer so that it never names a task.
#pragma once

#include <string>
#include <vector>

#include "harness/html_report.h"

namespace nibble {

/** The drop-the-feature table of the task's seed, drawn when a report carries no calibration;
 *  empty for a task without one (a gate of another scale would make them misleading). */
std::vector<ErrorAnchor> task_error_anchors(const std::string& task, const std::string& config);

}  // namespace nibble
