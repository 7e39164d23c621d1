// html_report.h: `nibble report html REPORT.json [BASE.json] -o report.html`: one self-contained
// HTML page a person reads (no network, no script: inline CSS and inline SVG only).
//
// Sections: the verdict (disposition + reason); the error against the gate on a log scale, with the
// drop-the-feature reference points for context; time per sample across the positions (when the
// report has them: the decode task's KV positions); the distribution of the samples; a roofline bar
// (floors at measured and datasheet bandwidth, the candidate, the base, the reports graded beside
// it, never typed-in times); with reports beside it, their lineup table (harness/lineup.h);
// with a BASE report, `nibble compare`'s table; the provenance. Every string taken from a report is
// escaped. The page reads the report through ReportView only: what it shows follows the figures the
// report has, never the task's name; what the report does not carry (published times, the task's
// drop-the-feature points) comes in as HtmlAnchors.
//
// Key figures carry ids a test or a script can read from the DOM: #disposition, #reason,
// #median-us, #floor-measured-us, #floor-theoretical-us, #worst-rel-err, #gate, and, with a base,
// #compare-exit and one row per figure with class "verdict".
#pragma once

#include "harness/anchors.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/compare.h"
#include "harness/report_view.h"

namespace nibble {

/**
 * The points drawn beside the candidate's error: the rows of the report's calibration
 * (`nibble report html --calibration CAL.json` puts a `nibble calibrate` table there, and a grade
 * records its table's rows in correctness.calibration); else the two points a grade records there
 * (worst legitimate variant, best dropped-feature variant); else `task_anchors`, the task's own
 * drop-the-feature points (task_error_anchors), for context.
 */
std::vector<ErrorAnchor> error_anchors(const ReportView& report, const std::vector<ErrorAnchor>& task_anchors);

/** Where error_anchors() took its points from, in words, for the chart's caption. */
std::string error_anchor_source(const ReportView& report, const std::vector<ErrorAnchor>& task_anchors);

/** What the page draws beside the report's own figures, which the report does not carry: the
 *  task's drop-the-feature points (task_error_anchors), and other graded reports (`--beside`:
 *  bars in the roofline when comparable, rows in the lineup table either way). */
struct HtmlAnchors {
  std::vector<ErrorAnchor> errors;  // used when the report has no calibration (error_anchors)
  std::vector<ReportView> beside;
  std::vector<std::string> beside_labels;  // same length as beside: how each is named in the page
};

/** & < > " ' as entities, the rest as UTF-8 (utf8_text): safe in element text and in quoted attribute values. */
std::string html_escape(const std::string& s);

/** The start of a self-contained page in the report's style (doctype, `title` escaped, the inline
 *  CSS), up to an open <main> (`wide`: 1500 px for wide tables, not 1040); html_page_end() closes
 *  what it opened. The leaderboard's page uses them too. */
std::string html_page_begin(const std::string& title, bool wide = false);
std::string html_page_end();

/**
 * The page for `report` (read_report_view), with `anchors` drawn beside its figures. With `base`
 * (may be null) the comparison `cmp` (must then be given) is shown and BASE's median is drawn
 * beside the candidate's, unless cmp refused the times for their clock or graph-record mode
 * (Comparison::refused_timing_only). `report_label`/`base_label` name the files in the page.
 */
std::string render_html_report(const ReportView& report, const std::string& report_label, const HtmlAnchors& anchors,
                               const ReportView* base = nullptr, const std::string& base_label = "",
                               const Comparison* cmp = nullptr);

}  // namespace nibble
