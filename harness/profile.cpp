// profile.cpp: see profile.h.
#include "harness/profile.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>
#include <stdexcept>

namespace nibble {

namespace {

// Nsight Compute's metric names (ncu --query-metrics): time, DRAM throughput as a fraction of its
// peak, achieved occupancy (active warps over the SM's maximum), registers per thread.
constexpr const char* kNcuDuration = "gpu__time_duration.sum";
constexpr const char* kNcuDram = "dram__throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* kNcuOccupancy = "sm__warps_active.avg.pct_of_peak_sustained_active";
constexpr const char* kNcuRegisters = "launch__registers_per_thread";

std::string ncu_metrics() {
  return std::string(kNcuDuration) + "," + kNcuDram + "," + kNcuOccupancy + "," + kNcuRegisters;
}

bool executable(const std::string& p) { return !p.empty() && access(p.c_str(), X_OK) == 0; }

/** A number of the CSV ("1,234.5" as ncu may print it, "n/a" as NaN). */
double number(const std::string& s) {
  std::string t;
  for (char c : s)
    if (c != ',') t += c;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  return end == t.c_str() ? NAN : v;
}

/** Microseconds per unit of a time column ("nsecond", "usecond", "msecond", "second", "ns"). */
double to_us(const std::string& unit) {
  if (unit == "nsecond" || unit == "ns") return 1e-3;
  if (unit == "usecond" || unit == "us") return 1;
  if (unit == "msecond" || unit == "ms") return 1e3;
  if (unit == "second" || unit == "s") return 1e6;
  return NAN;
}

struct Kernel {
  int launches = 0;
  double total_us = 0, dram = 0, occupancy = 0, registers = 0;
};

}  // namespace

void check_profiler(const std::string& tool) {
  if (tool != "ncu" && tool != "nsys")
    throw std::invalid_argument("--profile takes ncu (Nsight Compute) or nsys (Nsight Systems), not '" + tool + "'");
}

std::string find_profiler(const std::string& tool) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  for (std::string dir; std::getline(ss, dir, ':');)
    if (!dir.empty() && executable(dir + "/" + tool)) return dir + "/" + tool;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* d = std::getenv(var); d && executable(std::string(d) + "/bin/" + tool)) return std::string(d) + "/bin/" + tool;
  if (executable("/usr/local/cuda/bin/" + tool)) return "/usr/local/cuda/bin/" + tool;
  return "";
}

std::string profile_path(const std::string& tool, const std::string& report_path) {
  std::string base = report_path;
  if (base.size() > 5 && base.compare(base.size() - 5, 5, ".json") == 0) base.resize(base.size() - 5);
  return base + (tool == "ncu" ? ".ncu-rep" : ".nsys-rep");
}

std::vector<std::string> profiler_run_argv(const std::string& tool, const std::string& exe, const std::string& report_path) {
  const std::string rep = profile_path(tool, report_path);
  if (tool == "ncu")
    // --clock-control none: the clocks the graded run had, not ncu's base clocks; only the kernels
    // inside the harness's NVTX range (not the build's, not the checked calls').
    return {exe, "--clock-control", "none", "--nvtx", "--nvtx-include", std::string(kProfileRange) + "/", "--metrics", ncu_metrics(),
            "--export", rep, "--force-overwrite"};
  // nsys names the file itself from -o without its extension.
  return {exe, "profile", "--trace", "cuda,nvtx", "--force-overwrite", "true", "--output", rep.substr(0, rep.size() - 9)};
}

std::vector<std::string> profiler_export_argv(const std::string& tool, const std::string& exe, const std::string& report_path) {
  const std::string rep = profile_path(tool, report_path);
  if (tool == "ncu") return {exe, "--import", rep, "--csv", "--page", "raw", "--print-units", "base", "--metrics", ncu_metrics()};
  return {exe, "stats", "--report", "cuda_gpu_kern_sum", "--format", "csv", "--force-export", "true", rep};
}

std::vector<std::string> split_csv_record(const std::string& line) {
  std::vector<std::string> out;
  std::string f;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        f += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        f += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(f);
      f.clear();
    } else if (c != '\r') {
      f += c;
    }
  }
  out.push_back(f);
  return out;
}

nlohmann::ordered_json profile_top_kernels(const std::string& tool, const std::string& csv, int top) {
  // The table starts at its header (the first line naming `key`): ncu quotes every field, nsys only
  // those with commas; the profilers' own messages ("==PROF== ...", "Processing ...") come before.
  const std::string key = tool == "ncu" ? "Kernel Name" : "Total Time (ns)";
  std::vector<std::vector<std::string>> rows;
  std::stringstream ss(csv);
  bool in_table = false;
  for (std::string line; std::getline(ss, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!in_table) {
      if (line.rfind("==", 0) == 0 || line.find(key) == std::string::npos) continue;
      in_table = true;
    } else if (line.empty()) {
      break;
    }
    rows.push_back(split_csv_record(line));
  }
  auto column = [&](const std::string& name) -> int {
    if (rows.empty()) return -1;
    const auto& h = rows.front();
    const auto it = std::find(h.begin(), h.end(), name);
    return it == h.end() ? -1 : int(it - h.begin());
  };
  std::map<std::string, Kernel> kernels;
  if (tool == "ncu") {
    // --page raw: a header row, a units row, then one row per profiled launch.
    const int name = column("Kernel Name"), dur = column(kNcuDuration), dram = column(kNcuDram), occ = column(kNcuOccupancy),
              regs = column(kNcuRegisters);
    if (name < 0 || dur < 0 || rows.size() < 2)
      throw std::runtime_error("ncu's export has no per-kernel table with 'Kernel Name' and " + std::string(kNcuDuration));
    const double scale = rows[1].size() > size_t(dur) ? to_us(rows[1][size_t(dur)]) : NAN;
    if (std::isnan(scale)) throw std::runtime_error("ncu's export has no time unit for " + std::string(kNcuDuration));
    for (size_t i = 2; i < rows.size(); ++i) {
      const auto& r = rows[i];
      if (r.size() <= size_t(std::max({name, dur, dram, occ, regs}))) continue;
      Kernel& k = kernels[r[size_t(name)]];
      ++k.launches;
      k.total_us += number(r[size_t(dur)]) * scale;
      if (dram >= 0) k.dram += number(r[size_t(dram)]);
      if (occ >= 0) k.occupancy += number(r[size_t(occ)]);
      if (regs >= 0) k.registers += number(r[size_t(regs)]);
    }
  } else {
    // nsys stats cuda_gpu_kern_sum: one row per kernel name, times in ns.
    const int name = column("Name"), total = column("Total Time (ns)"), inst = column("Instances");
    if (name < 0 || total < 0 || inst < 0)
      throw std::runtime_error("nsys stats' export has no cuda_gpu_kern_sum table with Name, Total Time (ns) and Instances");
    for (size_t i = 1; i < rows.size(); ++i) {
      const auto& r = rows[i];
      if (r.size() <= size_t(std::max({name, total, inst}))) continue;
      Kernel& k = kernels[r[size_t(name)]];
      const double launches = number(r[size_t(inst)]);
      if (!(launches >= 0 && launches < 1e9)) continue;  // not a count: not a kernel's row
      k.launches += int(launches);
      k.total_us += number(r[size_t(total)]) * 1e-3;
    }
  }
  std::vector<std::pair<std::string, Kernel>> order(kernels.begin(), kernels.end());
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second.total_us > b.second.total_us; });
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  auto or_null = [](double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(); };
  for (size_t i = 0; i < order.size() && int(i) < top; ++i) {
    const auto& [n, k] = order[i];
    nlohmann::ordered_json j = {{"name", n},
                                {"launches", k.launches},
                                {"total_us", or_null(k.total_us)},
                                {"mean_us", or_null(k.launches ? k.total_us / k.launches : NAN)}};
    if (tool == "ncu") {
      j["dram_throughput_pct"] = or_null(k.dram / k.launches);
      j["achieved_occupancy_pct"] = or_null(k.occupancy / k.launches);
      j["registers_per_thread"] = or_null(k.registers / k.launches);
    }
    out.push_back(j);
  }
  return out;
}

}  // namespace nibble
