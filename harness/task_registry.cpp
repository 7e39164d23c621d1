// task_registry.cpp: the one list of tasks (a new task adds its line here, docs/adding-a-task.md), and
// replay_error, which every task's replay spec passes through.
#include <algorithm>
#include <map>
#include <stdexcept>

#include "harness/ledger.h"
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

std::string replay_error(const Task& task, const std::string& config, const nlohmann::json& replay, const CallLedger& ledger) {
  std::map<int, std::vector<int>> picks;         // round -> its kept calls, ascending
  std::map<int, std::vector<uint64_t>> seeds;    // round -> the input seeds revealed, in call order
  int rounds = 0;
  for (const LedgerCall& c : ledger.calls()) {
    rounds = std::max(rounds, c.round + 1);
    if (c.kept) picks[c.round].push_back(c.call);
    seeds[c.round].push_back(c.seed);  // the ledger took the calls in sequence (else a violation)
  }
  for (auto& [r, p] : picks) std::sort(p.begin(), p.end());
  if (!replay.is_array() || int(replay.size()) != rounds)
    return "the replay spec the candidate's child wrote is not one per timed round (the ledger saw " + std::to_string(rounds) + ")";
  for (int r = 0; r < rounds; ++r) {
    const nlohmann::json& round = replay[size_t(r)];
    if (!round.is_object() || !round.contains("spec") || round.value("prefix", nlohmann::json()) != nlohmann::json(timed_round_prefix(r)))
      return "the replay spec the candidate's child wrote has no round " + std::to_string(r) + " of the harness's form";
    if (const std::string why = task.replay_spec_error(config, round["spec"], task.calls_per_round(), picks[r], seeds[r]);
        !why.empty())
      return "the replay spec the candidate's child wrote for round " + std::to_string(r) + " is refused: " + why;
  }
  return "";
}

std::string kept_digest_error(const Task& task, const SafetensorsFile& timed, const CallLedger& ledger, const nlohmann::json& facts) {
  for (const LedgerCall& c : ledger.calls()) {
    if (!c.kept) continue;
    const std::string name = timed_call_name(c.round, c.call);
    try {
      if (task.kept_digest(timed, name, facts) != c.digest)
        return "the outputs read back for kept call " + name + " are not the ones its \"done\" committed to the ledger "
               "(they changed after its window closed)";
    } catch (const std::exception& e) {
      return "the outputs of kept call " + name + " cannot be checked against its commitment: " + e.what();
    }
  }
  return "";
}

std::vector<double> calibration_overheads_us(const Task& task, const std::string& config, const nlohmann::json& facts,
                                             const std::vector<double>& window_us, const std::vector<double>& span_us) {
  const std::vector<nlohmann::json> forms = task.window_work_forms(config);
  const WindowWork own = task.window_work(config, facts);
  size_t pick = 0;
  while (pick < forms.size() && !(task.window_work(config, forms[pick]) == own)) ++pick;
  std::vector<double> out;
  if (pick == forms.size()) return out;  // no window mirrored this solution's work: nothing measured it
  // A span list that does not pair with the windows one to one credits nothing; a span outside
  // (0, window] (none recorded, or not the probe's) is dropped.
  if (window_us.size() != span_us.size()) return out;
  for (size_t i = pick + forms.size(); i < window_us.size(); i += forms.size())  // the first of each form warms up
    if (span_us[i] > 0 && span_us[i] <= window_us[i]) out.push_back(window_us[i] - span_us[i]);
  return out;
}

}  // namespace nibble
