// report_cli.h: the command lines of `nibble compare`, `nibble report show|html` and
// `nibble leaderboard`.
//
// Their exit codes are a CI contract (compare.h), so a bad command line must exit 4 like any other
// bad input, not with the code the rest of the CLI uses for a usage error. Hence each parses its
// own arguments with its own CLI11 parser: main() only registers the names (add_report_commands).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace nibble {

/**
 * Registers `compare`, `report` and `leaderboard` on the nibble command line. Each takes
 * everything after its name unparsed, runs from its callback and ends the process with its own exit
 * code (std::exit after flushing), so main() needs no dispatch line for them.
 */
void add_report_commands(CLI::App& app);

/** Parses `args` (the words after a command's name, in order) with `app`, a command's own parser.
 *  Returns -1 to go on, else the exit code: 0 after --help, `bad_input` for a bad command line. */
int parse_own_args(CLI::App& app, std::vector<std::string> args, int bad_input);

/** A value given on the command line must not be empty: CLI11 reads "" as 0 for a number
 *  (--max-slowdown "" would be 0%), and for a path or a name "" would read as "not given" and
 *  silently pick the default (the fixture cache, every task, every GPU). */
extern const CLI::Validator kNonEmptyValue;

/** When `app` takes commands and `first` (the first argument) is neither an option nor one of them:
 *  "unknown command 'x'; the commands are a, b (<shown> --help)", shown the command line up to it
 *  (default: the app's name); else "". CLI11 alone says "A
 *  subcommand is required" (`nibble bogus`, `nibble report bogus x`). Hidden commands (no group)
 *  are accepted and not listed. */
std::string unknown_command(const CLI::App& app, const std::string& first, const std::string& shown = "");

/** "nibble <version> (built at <commit>)": what `--version` prints after any command, and what a
 *  report's nibble_version and git.build_commit say. */
std::string version_line();
/** `--version` (version_line) on `app` and on every command under it, however deep: `nibble fixture
 *  build --version` answers as `nibble --version` does, not with the options it lacks. */
void add_version_flags(CLI::App& app);

/** `nibble compare BASE.json NEW.json [--max-slowdown PCT] [--alpha A] [--force] [--json]` on the
 *  arguments after "compare"; returns its exit code (0-4, see compare.h). */
int compare_command(std::vector<std::string> args);

/**
 * `nibble report show REPORT.json` (the grade's summary, rebuilt from the report) and
 * `nibble report html REPORT.json [BASE.json] -o report.html` on the arguments after "report".
 * Returns 0 when done, 1 when the output cannot be written, 4 for bad input or a bad command line.
 */
int report_command(std::vector<std::string> args);

/**
 * `nibble leaderboard RESULTS... [-o board.html] [--markdown board.md] [--json board.json]` on the
 * arguments after "leaderboard": RESULTS are reports or folders (searched recursively for reports),
 * ranked per task and config (make_leaderboard, lineup.h); the text table always goes to stdout.
 * Returns 0 when done, 1 when a file cannot be written, 4 for bad input or a bad command line.
 */
int leaderboard_command(std::vector<std::string> args);

}  // namespace nibble
