// gemm_tasks.h: the registry's tasks of the GEMM ABI (include/nibble/nibble_gemm.h) and their
// bundled solutions, so the tests that run every GEMM task pick a new one up without an edit.
#pragma once

#include <string>
#include <tuple>
#include <vector>

#include "bundled_solutions.h"
#include "harness/task.h"

namespace nibble::test {

/** Names of every registered task whose ABI is the GEMM one, in registry order. */
inline std::vector<std::string> gemm_task_names() {
  std::vector<std::string> out;
  for (const Task* t : all_tasks())
    if (t->abi() == SolutionLibrary::Abi::Gemm) out.push_back(t->name());
  return out;
}

/** (bundled solution, task) for every GEMM task and every bundled solution of its family. */
inline std::vector<std::tuple<BundledSolution, std::string>> gemm_task_solutions() {
  std::vector<std::tuple<BundledSolution, std::string>> out;
  for (const Task* t : all_tasks())
    if (t->abi() == SolutionLibrary::Abi::Gemm)
      for (const BundledSolution& s : bundled_solutions(t->family())) out.emplace_back(s, t->name());
  return out;
}

}  // namespace nibble::test
