// task_registry.cpp: the one list of tasks. A new task adds its line here (docs/adding-a-task.md).
#include <stdexcept>

#include "harness/task.h"

namespace nibble {

const Task& decode_task();       // harness/decode/decode_task.cpp
const Task& gemm_nvfp4_task();   // harness/gemm_fp4/gemm_task.cpp
const Task& gemm_mxfp4_task();
const Task& int4_gemm_task();    // harness/int4_gemm/int4_gemm_task.cpp

const std::vector<const Task*>& all_tasks() {
  static const std::vector<const Task*> tasks{&decode_task(), &gemm_nvfp4_task(), &gemm_mxfp4_task(),
                                                &int4_gemm_task()};
  return tasks;
}

const Task* task_or_null(const std::string& name) {
  for (const Task* t : all_tasks())
    if (t->name() == name) return t;
  return nullptr;
}

const Task& find_task(const std::string& name) {
  if (const Task* t = task_or_null(name)) return *t;
  std::string known;
  for (const Task* t : all_tasks()) known += (known.empty() ? "" : ", ") + t->name();
  throw std::invalid_argument("unknown task '" + name + "'; the tasks are: " + known);
}

}  // namespace nibble
