// task_anchors.cpp: the anchors of a report's task, from the registry (task_anchors.h).
#include "harness/task_anchors.h"

#include "harness/task.h"

namespace nibble {

std::vector<ErrorAnchor> task_error_anchors(const std::string& task, const std::string& config) {
  const Task* t = task_or_null(task);
  return t ? t->error_anchors(config) : std::vector<ErrorAnchor>{};
}

std::vector<std::string> task_baseline_solutions(const std::string& task) {
  const Task* t = task_or_null(task);
  return t ? t->baseline_solutions() : std::vector<std::string>{};
}

}  // namespace nibble
