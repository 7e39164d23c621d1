// task_anchors.h: what the readers of reports set beside a report that the report itself does not
// carry, per task: the task's drop-the-feature points (`nibble report html`) and its bundled
// baselines (`nibble leaderboard`). Kept out of the renderers so that they never name a task.
#pragma once

#include <string>
#include <vector>

#include "harness/html_report.h"

namespace nibble {

/** The drop-the-feature table of the task's seed, drawn when a report carries no calibration;
 *  empty for a task without one (a gate of another scale would make them misleading). */
std::vector<ErrorAnchor> task_error_anchors(const std::string& task, const std::string& config);

/** The task's bundled baseline solutions (Task::baseline_solutions); empty for an unknown task. */
std::vector<std::string> task_baseline_solutions(const std::string& task);

}  // namespace nibble
