// html_report.h: `nibble report html REPORT.json [BASE.json] -o report.html`: one self-contained
// HTML page a person reads (no network, no script: inline CSS and inline SVG only).
//
// Sections: the verdict (disposition + reason); the error against the gate on a log scale, with the
// drop-the-feature reference points for context; time per decode step across the positions; the
// distribution of the samples; a roofline bar (floors at measured and datasheet bandwidth, the
// candidate, the base, the published anchors); with a BASE report, `nibble compare`'s table; the
// provenance. Every string taken from a report is escaped.
//
// Key figures carry ids a test or a script can read from the DOM: #disposition, #reason,
// #median-us, #floor-measured-us, #floor-theoretical-us, #worst-rel-err, #gate, and, with a base,
// #compare-exit and one row per figure with class "verdict".
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/compare.h"

namespace nibble {

/** One reference point on the error scale: a drop-the-feature variant and its worst error. */
struct ErrorAnchor {
  std::string name;
  double worst_rel_err;
  bool must_pass;  // a legitimate precision variant (true) or a mutant the gate must reject
};

/**
 * The points drawn beside the candidate's error: the rows (variant, worst, expected) of the report's
 * "calibration" (`nibble report html --calibration CAL.json` puts a `nibble calibrate` table
 * there) or of correctness.calibration; else the two points nibble grade records in
 * correctness.calibration (worst legitimate variant, best dropped-feature variant); else the
 * seed's drop-the-feature table for the decode task: most precise legitimate variant 4.9e-2,
 * nibble order swapped 1.43, one scale/zero per row 1.51, zero point ignored 10.2.
 */
std::vector<ErrorAnchor> error_anchors(const nlohmann::ordered_json& report);

/** Where error_anchors() took its points from, in words, for the chart's caption. */
std::string error_anchor_source(const nlohmann::ordered_json& report);

/** A published time for the same work, drawn on the roofline bar. */
struct TimeAnchor {
  std::string name;
  double us;
};

/** GPU-FACTS' PyTorch times on the H200 for the decode task's full config (dense bf16 in a CUDA
 *  graph 5340 us; int4 tinygemm in a CUDA graph 4160 us); empty for any other task, config or GPU
 *  (they were measured there only). */
std::vector<TimeAnchor> time_anchors(const nlohmann::ordered_json& report);

/** & < > " ' as entities: safe in element text and in quoted attribute values. */
std::string html_escape(const std::string& s);

/**
 * The page for `report` (validated, see load_report). With `base` (may be null) the comparison
 * `cmp` (must then be given) is shown and BASE's median is drawn beside the candidate's.
 * `report_label`/`base_label` name the files in the page.
 */
std::string render_html_report(const nlohmann::ordered_json& report, const std::string& report_label,
                               const nlohmann::ordered_json* base = nullptr, const std::string& base_label = "",
                               const Comparison* cmp = nullptr);

}  // namespace nibble
