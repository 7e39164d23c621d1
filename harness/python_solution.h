// python_solution.h: a solution written in Python (`nibble grade --solution my_kernel.py`), graded
// through the shim of its task's ABI family (solutions/python: libnibble_python_decode.so,
// libnibble_python_gemm.so), which embeds CPython; docs/architecture.md "Python solutions".
//
// The parent decides a job is Python (a .py path), checks the shim exists, and gives the child the
// shim's path and a scratch folder; the child adds the interpreter's folders to its sandbox, loads
// the shim like any .so and names the module to it (child_support.h, load_python_module).
#pragma once

#include <string>
#include <vector>

#include "harness/solution_library.h"

namespace nibble {

/** Whether `path` names a Python solution (ends in ".py"). */
bool is_python_solution(const std::string& path);

/** Whether this nibble was built with the Python shims (python3-dev present at configure time). */
bool python_shims_built();

/** The shim of an ABI family beside the nibble executable `exe`: <bin>/../lib/libnibble_python_<family>.so. */
std::string python_shim_path(const std::string& exe, SolutionLibrary::Abi abi);

/** Throws std::invalid_argument, for the user, when a Python solution cannot be graded here: the
 *  build has no shims (naming the package to install), or the shim `shim` is not built. */
void check_python_grade(const std::string& shim);

/** What the embedded interpreter reads, for the child's Landlock: its prefix, the base prefix of its
 *  virtual environment, its sys.path folders and user site (all found at configure time), and the
 *  PYTHONPATH and PYTHONHOME of this run. */
std::vector<std::string> python_readable_paths();

/** A Python solution's scratch folder for one child, under /dev/shm (the one folder the child's
 *  Landlock lets it create files in: SandboxSpec::writable): its TMPDIR and Triton's cache, fresh for each child so no grade
 *  reads what another compiled. Removed with everything in it when destroyed. */
class PythonScratch {
 public:
  /** Makes /dev/shm/nibble-python-XXXXXX; throws std::runtime_error when it cannot. */
  PythonScratch();
  ~PythonScratch();
  PythonScratch(const PythonScratch&) = delete;
  PythonScratch& operator=(const PythonScratch&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/** In the child, before the interpreter starts: TMPDIR, TRITON_CACHE_DIR, TRITON_HOME and
 *  XDG_CACHE_HOME point into `scratch` (Triton compiles into its cache and tempfile's folder; $HOME
 *  is not writable inside the sandbox), PYTHONDONTWRITEBYTECODE is set. */
void enter_python_scratch(const std::string& scratch);

}  // namespace nibble
