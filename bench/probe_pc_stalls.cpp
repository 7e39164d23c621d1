// probe_pc_stalls.cpp: where a decode solution's warps stall, by CUPTI's PC sampling (continuous
// mode, no kernel replay), for kernels Nsight Compute cannot profile: its replay reads the dataflow
// megakernel (issue 21) as a grid of (0, 0, 0) with every metric nan (reports/h100/session22-da3d507).
// The solution runs the decode step of a config (full by default) through the grader's DeviceModel
// and DecodeSession, --steps times at one position, between cuptiPCSamplingStart and Stop; every
// kernel's samples are then summed by stall reason (CUPTI's names less the
// "smsp__pcsamp_warps_issue_stalled_" prefix; "selected" is a warp issuing, not stalled), per
// function, and the PCs with the most samples are listed with their top reasons (offsets into the
// function's SASS: `cuobjdump -sass LIB` on the same build maps them). --csv writes every (function,
// PC offset, reason, samples) row, and --from-csv FILE prints the tables of such a file (no GPU).
//
// Run: build-hopper/bin/probe_pc_stalls [--solution megakernel_dataflow] [--config full] [--steps 20]
//        [--period 12] [--top 25] [--csv FILE]
// (--solution: a bundled library's name after libnibble_, or a path; NIBBLE_DF_MODE etc. apply as
// in the grader.) Exit 0 with the tables, 2 without a GPU or on bad arguments, 1 when CUPTI refuses.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <cupti_pcsampling.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_util.h"
#include "decode_bench.h"
#include "fixtures/decode/decode_config.h"
#include "harness/decode/decode_session.h"
#include "harness/decode/device_model.h"
#include "harness/solution_library.h"

namespace {

using namespace nibble;

#define PROBE_CUPTI(call)                                                                              \
  do {                                                                                                 \
    const CUptiResult r_ = (call);                                                                     \
    if (r_ != CUPTI_SUCCESS) {                                                                         \
      const char* s_ = nullptr;                                                                        \
      cuptiGetResultString(r_, &s_);                                                                   \
      throw std::runtime_error(std::string(#call) + ": " + (s_ ? s_ : "unknown CUPTI error") + " at " + \
                               __FILE__ + ":" + std::to_string(__LINE__));                             \
    }                                                                                                  \
  } while (0)

constexpr const char* kReasonPrefix = "smsp__pcsamp_warps_issue_stalled_";

/** A CUPTI PC sampling data buffer of `pcs` PC records with room for `reasons` stall reasons each. */
struct SampleBuffer {
  CUpti_PCSamplingData data{};
  std::vector<CUpti_PCSamplingPCData> pcs;
  std::vector<std::vector<CUpti_PCSamplingStallReason>> reasons;
  SampleBuffer(size_t n_pcs, size_t n_reasons) : pcs(n_pcs), reasons(n_pcs, std::vector<CUpti_PCSamplingStallReason>(n_reasons)) {
    data.size = sizeof(CUpti_PCSamplingData);
    data.collectNumPcs = n_pcs;
    data.pPcData = pcs.data();
    for (size_t i = 0; i < n_pcs; ++i) {
      pcs[i] = CUpti_PCSamplingPCData{};
      pcs[i].size = sizeof(CUpti_PCSamplingPCData);
      pcs[i].stallReason = reasons[i].data();
    }
  }
};

/** The samples of one PC by stall reason (short_reason names). */
struct PcRow {
  std::string function;
  uint64_t offset = 0;
  std::map<std::string, uint64_t> by_reason;
};

struct Totals {
  uint64_t total_samples = 0, dropped = 0, non_user = 0;
  bool hardware_buffer_full = false;
  bool from_csv = false;  // read back (read_csv): CUPTI's counts are not in the file
  std::map<std::pair<std::string, uint64_t>, PcRow> pcs;
};

std::string short_reason(const std::string& name) {
  return name.rfind(kReasonPrefix, 0) == 0 ? name.substr(std::strlen(kReasonPrefix)) : name;
}

/** Fold a buffer's PC records into t, reason indices named by `names` (the buffer's function names
 *  are CUPTI's, freed by the caller: copied). */
void fold(const CUpti_PCSamplingData& d, const std::map<uint32_t, std::string>& names, Totals& t) {
  t.total_samples += d.totalSamples;
  t.dropped += d.droppedSamples;
  t.non_user += d.nonUsrKernelsTotalSamples;
  t.hardware_buffer_full = t.hardware_buffer_full || d.hardwareBufferFull;
  for (size_t i = 0; i < d.totalNumPcs; ++i) {
    const CUpti_PCSamplingPCData& p = d.pPcData[i];
    const std::string fn = p.functionName ? p.functionName : "?";
    PcRow& row = t.pcs[{fn, p.pcOffset}];
    row.function = fn;
    row.offset = p.pcOffset;
    for (size_t k = 0; k < p.stallReasonCount; ++k) {
      const auto it = names.find(p.stallReason[k].pcSamplingStallReasonIndex);
      row.by_reason[it == names.end() ? "reason " + std::to_string(p.stallReason[k].pcSamplingStallReasonIndex) : it->second] +=
          p.stallReason[k].samples;
    }
  }
}

// CUPTI reports each reason twice: R (every sample of a warp stalled on R) and R_not_issued (those
// in which the warp's scheduler issued nothing: a subset of R's). The shares are of the R counts,
// whose sum is CUPTI's total; R_not_issued is shown beside its R.
constexpr const char* kNotIssued = "_not_issued";

bool is_not_issued(const std::string& r) {
  const size_t n = std::strlen(kNotIssued);
  return r.size() > n && r.compare(r.size() - n, n, kNotIssued) == 0;
}

/** R's samples (the first) and R_not_issued's (the second) of m, by R, largest first. */
std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> by_base_reason(const std::map<std::string, uint64_t>& m) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> base;
  for (const auto& [r, n] : m) {
    if (is_not_issued(r))
      base[r.substr(0, r.size() - std::strlen(kNotIssued))].second += n;
    else
      base[r].first += n;
  }
  std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> v(base.begin(), base.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& x, const auto& y) { return x.second.first > y.second.first; });
  return v;
}

uint64_t base_samples(const std::map<std::string, uint64_t>& m) {
  uint64_t n = 0;
  for (const auto& [r, k] : m) n += is_not_issued(r) ? 0 : k;
  return n;
}

/** The tables: samples by reason over every kernel, per kernel, and the `top` PCs. */
void print_tables(const Totals& t, int top) {
  std::map<std::string, uint64_t> all;
  std::map<std::string, std::map<std::string, uint64_t>> by_function;
  for (const auto& [key, row] : t.pcs)
    for (const auto& [r, n] : row.by_reason) {
      all[r] += n;
      by_function[row.function][r] += n;
    }
  const uint64_t sampled = base_samples(all);
  if (t.from_csv)
    std::printf("samples: %llu in PC records (a --csv file: CUPTI's total, dropped and non-user counts are not in it)\n",
                (unsigned long long)sampled);
  else
    std::printf("samples: %llu in PC records, %llu in all (CUPTI's total), %llu dropped, %llu in non-user kernels%s\n",
              (unsigned long long)sampled, (unsigned long long)t.total_samples, (unsigned long long)t.dropped,
              (unsigned long long)t.non_user, t.hardware_buffer_full ? " (the hardware buffer filled: raise --period)" : "");
  const auto print_reasons = [](const std::map<std::string, uint64_t>& m) {
    const uint64_t n = std::max<uint64_t>(base_samples(m), 1);
    std::printf("  %-22s %12s %7s %14s\n", "reason", "samples", "share", "not issued");
    for (const auto& [r, c] : by_base_reason(m))
      if (c.first > 0)
        std::printf("  %-22s %12llu %6.1f%% %14llu\n", r.c_str(), (unsigned long long)c.first, 100.0 * double(c.first) / double(n),
                    (unsigned long long)c.second);
  };
  std::printf("\nstall reasons, all kernels (\"selected\": issuing, not stalled):\n");
  print_reasons(all);
  for (const auto& [fn, m] : by_function) {
    const uint64_t n = base_samples(m);
    if (n == 0) continue;
    std::printf("\n%s (%llu samples, %.1f%%):\n", fn.c_str(), (unsigned long long)n, 100.0 * double(n) / double(std::max<uint64_t>(sampled, 1)));
    print_reasons(m);
  }
  std::vector<const PcRow*> rows;
  for (const auto& [key, row] : t.pcs)
    if (base_samples(row.by_reason) > 0) rows.push_back(&row);
  std::stable_sort(rows.begin(), rows.end(),
                   [](const PcRow* x, const PcRow* y) { return base_samples(x->by_reason) > base_samples(y->by_reason); });
  std::printf("\nthe %d PCs with the most samples (function, SASS offset, samples, share, top reasons):\n", top);
  for (int i = 0; i < top && i < int(rows.size()); ++i) {
    const PcRow& r = *rows[size_t(i)];
    const uint64_t n = base_samples(r.by_reason);
    std::string why;
    const auto v = by_base_reason(r.by_reason);
    for (size_t j = 0; j < v.size() && j < 3 && v[j].second.first > 0; ++j)
      why += (j ? ", " : "") + v[j].first + " " + std::to_string(v[j].second.first);
    std::printf("  %-40.40s 0x%06llx %9llu %5.1f%%  %s\n", r.function.c_str(), (unsigned long long)r.offset, (unsigned long long)n,
                100.0 * double(n) / double(std::max<uint64_t>(sampled, 1)), why.c_str());
  }
}

/** Every (function, PC offset, reason, samples) row of t with samples, CSV with a header. */
void write_csv(const Totals& t, const std::string& path) {
  std::ofstream o(path);
  o << "function,pc_offset,reason,samples\n";
  for (const auto& [key, row] : t.pcs)
    for (const auto& [r, n] : row.by_reason)
      if (n > 0) o << row.function << "," << row.offset << "," << r << "," << n << "\n";
  if (!o) throw std::runtime_error("cannot write " + path);
}

/** The rows write_csv wrote (CUPTI's totals are not in it: the total is the rows' sum). Throws
 *  std::runtime_error naming the line that is not "function,offset,reason,samples". */
Totals read_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  Totals t;
  std::string line;
  int no = 0;
  while (std::getline(in, line)) {
    if (++no == 1 && line == "function,pc_offset,reason,samples") continue;
    std::vector<std::string> f;
    size_t at = 0;
    for (size_t c; (c = line.find(',', at)) != std::string::npos; at = c + 1) f.push_back(line.substr(at, c - at));
    f.push_back(line.substr(at));
    uint64_t offset = 0, n = 0;
    try {
      if (f.size() != 4 || f[1].empty() || f[3].empty() || f[1].find_first_not_of("0123456789") != std::string::npos ||
          f[3].find_first_not_of("0123456789") != std::string::npos)
        throw std::invalid_argument("fields");
      offset = std::stoull(f[1]);
      n = std::stoull(f[3]);
    } catch (const std::exception&) {
      throw std::runtime_error(path + ":" + std::to_string(no) + ": \"" + line +
                               "\" is not function,pc_offset,reason,samples (whole numbers; as --csv writes)");
    }
    PcRow& row = t.pcs[{f[0], offset}];
    row.function = f[0];
    row.offset = offset;
    row.by_reason[f[2]] += n;
  }
  t.from_csv = true;
  return t;
}

int run(const std::string& solution, const std::string& config, int steps, int period, int top, const std::string& csv) {
  const DecodeConfig cfg = decode_config(config);
  const SafetensorsFile& file = cached_decode_fixture(cfg);
  BENCH_CUDA(cudaFree(nullptr));  // the primary context, for CUPTI
  // The driver's cuCtxGetCurrent through the runtime (no link to libcuda: the program starts, and
  // says what is missing, on a machine without the driver).
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  BENCH_CUDA(cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault, &q));
  if (q != cudaDriverEntryPointSuccess || !fn) throw std::runtime_error("cuCtxGetCurrent is not available from the driver");
  CUcontext ctx = nullptr;
  if (reinterpret_cast<CUresult (*)(CUcontext*)>(fn)(&ctx) != CUDA_SUCCESS || !ctx)
    throw std::runtime_error("cuCtxGetCurrent: no current context");

  // Enabled first: CUPTI answers the stall-reason queries only on a context sampling is enabled on.
  CUpti_PCSamplingEnableParams en{};
  en.size = CUpti_PCSamplingEnableParamsSize;
  en.ctx = ctx;
  PROBE_CUPTI(cuptiPCSamplingEnable(&en));
  // The stall reasons this GPU reports, by index.
  size_t n_reasons = 0;
  CUpti_PCSamplingGetNumStallReasonsParams nr{};
  nr.size = CUpti_PCSamplingGetNumStallReasonsParamsSize;
  nr.ctx = ctx;
  nr.numStallReasons = &n_reasons;
  PROBE_CUPTI(cuptiPCSamplingGetNumStallReasons(&nr));
  std::vector<uint32_t> reason_index(n_reasons);
  std::vector<std::vector<char>> name_storage(n_reasons, std::vector<char>(CUPTI_STALL_REASON_STRING_SIZE));
  std::vector<char*> names(n_reasons);
  for (size_t i = 0; i < n_reasons; ++i) names[i] = name_storage[i].data();
  CUpti_PCSamplingGetStallReasonsParams sr{};
  sr.size = CUpti_PCSamplingGetStallReasonsParamsSize;
  sr.ctx = ctx;
  sr.numStallReasons = n_reasons;
  sr.stallReasonIndex = reason_index.data();
  sr.stallReasons = names.data();
  PROBE_CUPTI(cuptiPCSamplingGetStallReasons(&sr));
  std::map<uint32_t, std::string> reason_name;
  for (size_t i = 0; i < n_reasons; ++i) reason_name[reason_index[i]] = short_reason(names[i]);

  constexpr size_t kPcs = 20000;  // PC records per buffer: a decode kernel has a few thousand instructions
  SampleBuffer configured(kPcs, n_reasons);
  std::vector<CUpti_PCSamplingConfigurationInfo> info(8);
  for (auto& i : info) i = CUpti_PCSamplingConfigurationInfo{};
  info[0].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON;
  info[0].attributeData.stallReasonData.stallReasonCount = n_reasons;
  info[0].attributeData.stallReasonData.pStallReasonIndex = reason_index.data();
  info[1].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD;
  info[1].attributeData.samplingPeriodData.samplingPeriod = uint32_t(period);
  info[2].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE;
  info[2].attributeData.collectionModeData.collectionMode = CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS;
  info[3].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_ENABLE_START_STOP_CONTROL;
  info[3].attributeData.enableStartStopControlData.enableStartStopControl = 1;
  info[4].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_OUTPUT_DATA_FORMAT;
  info[4].attributeData.outputDataFormatData.outputDataFormat = CUPTI_PC_SAMPLING_OUTPUT_DATA_FORMAT_PARSED;
  info[5].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER;
  info[5].attributeData.samplingDataBufferData.samplingDataBuffer = &configured.data;
  info[6].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SCRATCH_BUFFER_SIZE;
  info[6].attributeData.scratchBufferSizeData.scratchBufferSize = size_t(256) << 20;
  info[7].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_HARDWARE_BUFFER_SIZE;
  info[7].attributeData.hardwareBufferSizeData.hardwareBufferSize = size_t(512) << 20;
  CUpti_PCSamplingConfigurationInfoParams cp{};
  cp.size = CUpti_PCSamplingConfigurationInfoParamsSize;
  cp.ctx = ctx;
  cp.numAttributes = info.size();
  cp.pPCSamplingConfigurationInfo = info.data();
  PROBE_CUPTI(cuptiPCSamplingSetConfigurationAttribute(&cp));

  Totals t;
  double step_ms = 0;
  {
    const SolutionLibrary lib(solution.find('/') == std::string::npos ? bench_solution_path(solution) : solution);
    DeviceModel model(cfg, file);
    TimedDecodeSteps timed(lib, model, cfg);
    CUpti_PCSamplingStartParams start{};
    start.size = CUpti_PCSamplingStartParamsSize;
    start.ctx = ctx;
    PROBE_CUPTI(cuptiPCSamplingStart(&start));
    for (int s = 0; s < steps; ++s) step_ms += timed.step();
    CUpti_PCSamplingStopParams stop{};
    stop.size = CUpti_PCSamplingStopParamsSize;
    stop.ctx = ctx;
    PROBE_CUPTI(cuptiPCSamplingStop(&stop));
    fold(configured.data, reason_name, t);
    // What did not fit the configured buffer at the stop.
    for (int guard = 0; guard < 1000; ++guard) {
      SampleBuffer more(kPcs, n_reasons);
      CUpti_PCSamplingGetDataParams gd{};
      gd.size = CUpti_PCSamplingGetDataParamsSize;
      gd.ctx = ctx;
      gd.pcSamplingData = &more.data;
      // OUT_OF_MEMORY: the hardware buffer filled (CUPTI's docs): what it holds is still folded, and
      // the report says so (a larger --period samples less).
      const CUptiResult r = cuptiPCSamplingGetData(&gd);
      if (r == CUPTI_ERROR_OUT_OF_MEMORY) t.hardware_buffer_full = true;
      else PROBE_CUPTI(r);
      fold(more.data, reason_name, t);
      if (r == CUPTI_ERROR_OUT_OF_MEMORY) break;
      if (more.data.remainingNumPcs == 0 && more.data.totalNumPcs == 0) break;
    }
    timed.close();
  }
  CUpti_PCSamplingDisableParams dis{};
  dis.size = CUpti_PCSamplingDisableParamsSize;
  dis.ctx = ctx;
  PROBE_CUPTI(cuptiPCSamplingDisable(&dis));

  std::printf("probe_pc_stalls: %s, config %s, %d steps at pos %d: %.1f us per step (CUDA events, sampled), sampling "
              "period 2^%d cycles\n",
              solution.c_str(), config.c_str(), steps, cfg.prefill, 1e3 * step_ms / std::max(steps, 1), period);
  print_tables(t, top);
  if (!csv.empty()) write_csv(t, csv);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"probe_pc_stalls: a decode solution's warp stall reasons by CUPTI PC sampling (no replay)"};
  std::string solution = "megakernel_dataflow", config = "full", csv, from_csv;
  int steps = 20, period = 12, top = 25;
  app.add_option("--solution", solution, "a bundled decode library's name after libnibble_, or a path to one")->capture_default_str();
  app.add_option("--config", config, "decode config")->capture_default_str();
  app.add_option("--steps", steps, "decode steps sampled")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--period", period, "sampling period: one sample per 2^period cycles per SM (CUPTI: 5 to 31)")
      ->check(CLI::Range(5, 31))
      ->capture_default_str();
  app.add_option("--top", top, "PCs listed")->check(CLI::Range(0, 100000))->capture_default_str();
  app.add_option("--csv", csv, "write every (function, PC offset, reason, samples) row here");
  app.add_option("--from-csv", from_csv, "no GPU: the tables of a --csv file (its samples only)")->check(CLI::ExistingFile);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints --help, or the error and the hint
    return code == 0 ? 0 : 2;
  }
  if (!from_csv.empty()) {
    try {
      print_tables(read_csv(from_csv), top);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "probe_pc_stalls: %s\n", e.what());
      return 2;
    }
  }
  try {
    (void)nibble::decode_config(config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "probe_pc_stalls: --config %s: %s\n", config.c_str(), e.what());
    return 2;
  }
  int n = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess || n == 0) {
    std::fprintf(stderr, "probe_pc_stalls: no usable CUDA GPU (%s): run it on a machine with an sm_90 GPU and its driver\n",
                 e != cudaSuccess ? cudaGetErrorString(e) : "no device");
    return 2;
  }
  try {
    return run(solution, config, steps, period, top, csv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "probe_pc_stalls: %s\n", e.what());
    return 1;
  }
}
