// variant_exports.h: the reference's own exports beyond the ABI (reference/decode/reference_options.h
// declares them: nibble_reference_numerics, nibble_reference_set_variant, nibble_reference_variant),
// written once for every task's reference .so over its variant table.
//
//   NIBBLE_REFERENCE_VARIANT_EXPORTS(kBaseSentence, rows, selection)
//     rows       an expression giving `const std::vector<nibble::ref::VariantRow>&` (row 0 is the
//                task itself, the default)
//     selection  a std::atomic<size_t> holding the selected row (the next build/prepare reads it)
#pragma once

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "reference/decode/reference_options.h"
#include "solutions/common/abi_util.h"

namespace nibble::ref {

/** One row of a reference's variant table as its exports need it. */
struct VariantRow {
  std::string name, description;
  bool must_pass = false;
  bool is_task = false;  ///< the task's definition (the default row): its sentence has no VARIANT part
};

/** The numerics sentence of every row (built once by the caller; pointers stay valid). */
inline std::vector<std::string> variant_sentences(const char* base, const std::vector<VariantRow>& rows) {
  std::vector<std::string> out;
  for (const auto& v : rows)
    out.push_back(v.is_task ? std::string(base)
                            : std::string(base) + "; VARIANT " + v.name + " (" +
                                  (v.must_pass ? "precision variant" : "drop-the-feature mutant") + "): " + v.description);
  return out;
}

/** Select the row called `name`; throws AbiFailure (INVALID_ARGUMENT) listing the names otherwise. */
inline void select_variant(const std::vector<VariantRow>& rows, const char* name, std::atomic<size_t>& selection) {
  std::string names;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (name && rows[i].name == name) {
      selection.store(i);
      return;
    }
    names += (i ? ", " : "") + rows[i].name;
  }
  throw sol::AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT,
                        std::string(name ? "unknown variant '" + std::string(name) + "'" : "null variant name") +
                            "; valid variants: " + names);
}

}  // namespace nibble::ref

#define NIBBLE_REFERENCE_VARIANT_EXPORTS(base, rows, selection)                                               \
  extern "C" {                                                                                                \
  NIBBLE_EXPORT const char* nibble_reference_numerics(void) {                                                 \
    try {                                                                                                     \
      static const std::vector<std::string> sentences = nibble::ref::variant_sentences(base, rows);           \
      return sentences.at(selection.load()).c_str();                                                          \
    } catch (...) {                                                                                           \
      return base; /* no exception crosses the ABI; only reachable if the host is out of memory */            \
    }                                                                                                         \
  }                                                                                                           \
  NIBBLE_EXPORT nibble_status nibble_reference_set_variant(const char* name, nibble_error* err) {             \
    return nibble::sol::abi_guard(err, [&] { nibble::ref::select_variant(rows, name, selection); });          \
  }                                                                                                           \
  NIBBLE_EXPORT const char* nibble_reference_variant(void) {                                                  \
    try {                                                                                                     \
      return (rows).at(selection.load()).name.c_str();                                                        \
    } catch (...) {                                                                                           \
      return "";                                                                                              \
    }                                                                                                         \
  }                                                                                                           \
  }
