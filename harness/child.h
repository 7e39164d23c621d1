// child.h: what runs inside the grader's child processes.
//
// The parent never loads a candidate: `nibble __child <job-fd>` reads a Job (protocol.h) from a
// descriptor the parent passed, opens one solution (candidate, reference or variant alike) in this
// fresh process, and writes its Result and outputs into the parent's channels. A load job only
// opens the solution (nibble grade where no GPU answers). A probe job reads the device's facts and
// measures its copy bandwidth and, for a task that asks, its weight-read floor.
#pragma once

namespace nibble {

/** `nibble __child <job-fd>`: 0 when the job completed; the Result says more either way. */
int child_main(int job_fd);

/** Result::error.kind values. */
inline constexpr const char* kErrLoad = "load";          // SolutionLibrary refused the .so
inline constexpr const char* kErrSolution = "solution";  // an entry point returned an error status
inline constexpr const char* kErrCuda = "cuda";          // a CUDA error surfaced after a solution call
inline constexpr const char* kErrHarness = "harness";    // fixture unreadable, out of memory, ...
inline constexpr const char* kErrTimeout = "timeout";    // the watchdog ended a call
inline constexpr const char* kErrInputModified = "input_modified";  // a read-only input changed
inline constexpr const char* kErrSandbox = "sandbox";    // --require-sandbox, and a layer could not be applied

}  // namespace nibble
