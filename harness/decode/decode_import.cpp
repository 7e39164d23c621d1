// decode_import.cpp: see decode_import.h.
#include "harness/decode/decode_import.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <iterator>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "fixtures/decode/checkpoint_import.h"
#include "fixtures/fixture.h"
#include "fixtures/safetensors.h"
#include "fixtures/sha256.h"
#include "harness/cuda_check.h"
#include "harness/decode/device_model.h"
#include "harness/device_buffer.h"
#include "harness/solution_library.h"
#include "reference/decode/oracle_fp64.h"

namespace nibble {
namespace {

namespace fs = std::filesystem;

/** The fixture as staged, caches empty, for the prefix run; removed on every path. */
constexpr const char* kStagingFile = ".import-staging.safetensors";

/** The fixture's views over the imported tensors, the KV caches and the tokens (all host memory
 *  the caller keeps alive), in cfg.tensors() order. */
std::vector<TensorView> fixture_views(const ImportedDecodeModel& m, const std::vector<std::vector<uint16_t>>& k,
                                      const std::vector<std::vector<uint16_t>>& v, const std::vector<int64_t>& tokens) {
  std::vector<TensorView> views;
  for (const TensorSpec& t : m.cfg.tensors()) {
    const void* data = nullptr;
    size_t n = size_t(t.nbytes());
    if (t.name == "tokens") {
      data = tokens.data();
    } else if (t.name.rfind("kv.", 0) == 0) {
      const int layer = std::stoi(t.name.substr(3));
      data = (t.name.back() == 'k' ? k : v)[size_t(layer)].data();
    } else {
      data = m.tensor(t.name).data();
    }
    views.push_back({t.name, t.dtype, t.shape, data, n});
  }
  return views;
}

/** --out must be a new folder or an empty one, not the checkpoint's and not inside the fixture
 *  cache (which holds only fixtures generated from their seed). Empty: nothing but a lock file and
 *  the staging file an import killed before it finished leaves (`locked`: this process holds the
 *  folder's lock, so that staging file is no other import's, and it is removed). */
void check_import_out(const std::string& out, const std::string& checkpoint, bool locked = false) {
  std::error_code ec;
  const fs::path o = fs::weakly_canonical(fs::absolute(out), ec);
  if (fs::is_symlink(out, ec) && !fs::exists(out, ec))
    throw std::invalid_argument("--out " + out + " is a dangling symbolic link; name a new folder");
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec))
      throw std::invalid_argument("--out " + out + " exists and is not a folder; name a new folder");
    bool empty = true;
    for (const fs::directory_entry& e : fs::directory_iterator(out, ec)) {
      const std::string name = e.path().filename().string();
      if (name == kFolderLockFile) continue;
      if (name == kStagingFile) {
        if (locked) fs::remove(e.path(), ec);
        continue;
      }
      empty = false;
    }
    if (!empty)
      throw std::invalid_argument("--out " + out + " is not empty" +
                                  (fs::equivalent(out, checkpoint, ec) ? " (it is the checkpoint's folder)" : "") +
                                  ": name a new or empty folder, nothing is overwritten");
  }
  const auto inside = [&o](const fs::path& root) {
    const auto rel = o.lexically_relative(root);
    return !rel.empty() && *rel.begin() != "..";
  };
  // Its shards and index are the import's source: a fixture among them would be the next import's.
  const fs::path ck = fs::weakly_canonical(fs::absolute(checkpoint), ec);
  if (!ck.empty() && !fs::equivalent(out, checkpoint, ec) && inside(ck))
    throw std::invalid_argument("--out " + out + " is inside the checkpoint's folder (" + ck.string() +
                                "): name a folder outside it");
  try {
    // The cache root: <root>/fixtures/<task>/<config>/<seed folder>.
    const fs::path cache = fs::weakly_canonical(
        fs::absolute(fs::path(default_fixture_dir(kDecodeTask, "tiny", 0)).parent_path().parent_path().parent_path().parent_path()));
    if (inside(cache))
      throw std::invalid_argument("--out " + out + " is inside the fixture cache (" + cache.string() +
                                  "), which holds only fixtures generated from their seed: name a folder outside it");
  } catch (const std::runtime_error&) {
    // no cache folder configured: nothing to be inside of
  }
}

bool gpu_answers() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

/** The prefix through the fp32 reference .so: build_model on the staged fixture (zero caches), one
 *  decode_step per prefix position, the caches read back. */
void prefix_on_gpu(const DecodeConfig& cfg, const SafetensorsFile& staged, const std::string& reference,
                   const std::vector<int64_t>& ids, std::vector<std::vector<uint16_t>>& k,
                   std::vector<std::vector<uint16_t>>& v) {
  const auto& x = cfg.dims;
  SolutionLibrary lib(reference, SolutionLibrary::Abi::Decode);
  DeviceModel model(cfg, staged);
  cudaStream_t stream = nullptr;
  NIBBLE_CUDA_CALL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceTensor tok(DType::I64, {x.batch}), logits(DType::F32, {x.batch, x.vocab});
  void* handle = nullptr;
  nibble_error err{};
  check_status(lib.build_model(model.abi(), stream, &handle, &err), err, "build_model");
  for (int pos = 0; pos < cfg.prefill; ++pos) {
    const std::vector<int64_t> t(size_t(x.batch), ids[size_t(pos)]);
    NIBBLE_CUDA_CALL(cudaMemcpyAsync(tok.buf.get(), t.data(), t.size() * 8, cudaMemcpyHostToDevice, stream));
    check_status(lib.decode_step(handle, &tok.desc, pos, &logits.desc, stream, &err), err, "decode_step");
  }
  NIBBLE_CUDA_CALL(cudaDeviceSynchronize());  // the ABI allows work on any stream, as the grader syncs
  for (int l = 0; l < x.layers; ++l) {
    const std::string p = "kv." + std::to_string(l) + ".";
    NIBBLE_CUDA_CALL(cudaMemcpy(k[size_t(l)].data(), model.device_ptr(p + "k"), k[size_t(l)].size() * 2, cudaMemcpyDeviceToHost));
    NIBBLE_CUDA_CALL(cudaMemcpy(v[size_t(l)].data(), model.device_ptr(p + "v"), v[size_t(l)].size() * 2, cudaMemcpyDeviceToHost));
  }
  check_status(lib.teardown(handle, stream, &err), err, "teardown");
  NIBBLE_CUDA_CALL(cudaStreamSynchronize(stream));
  NIBBLE_CUDA_CALL(cudaStreamDestroy(stream));
}

}  // namespace

FixtureManifest import_decode_fixture(const ImportOptions& opt, const std::function<void(const std::string&)>& log) {
  if (opt.out.empty()) throw std::invalid_argument("--out names the fixture folder to write");
  if (opt.out == "-") throw std::invalid_argument("--out -: a fixture is a folder, not a stream; name a folder (./- for one called '-')");
  if (opt.path != "cpu" && opt.path != "gpu" && opt.path != "auto")
    throw std::invalid_argument("--path is cpu, gpu or auto, not '" + opt.path + "'");
  if (!opt.config.empty()) (void)decode_config(opt.config);  // an unknown one is said before the checkpoint is read
  check_import_out(opt.out, opt.checkpoint);
  if (opt.path == "gpu" && !gpu_answers())
    throw std::invalid_argument("--path gpu, but no GPU answers here (cudaGetDeviceCount): use --path cpu "
                                "(small configs) or run it on a GPU machine");
  const CheckpointFormat format = checkpoint_format_from_name(opt.format);
  log("reading " + std::string(checkpoint_format_name(format)) + " checkpoint " + opt.checkpoint);
  ImportedDecodeModel m = read_decode_checkpoint(opt.checkpoint, format, opt.config);
  const DecodeConfig& cfg = m.cfg;
  const auto& x = cfg.dims;
  if (x.batch != 1) throw std::logic_error("fixture import: the decode configs have batch 1");

  // The ids: the prefix, then the fixture's decode steps.
  const std::vector<int64_t> ids = read_token_ids(opt.tokens);
  const size_t need = size_t(cfg.prefill) + size_t(cfg.decode_steps);
  if (ids.size() < need)
    throw std::invalid_argument("token file '" + opt.tokens + "' has " + std::to_string(ids.size()) + " ids; config " +
                                cfg.name + " needs " + std::to_string(need) + " (" + std::to_string(cfg.prefill) +
                                " for the KV prefix, then " + std::to_string(cfg.decode_steps) + " decode steps)");
  // Every id, the unused ones after the decode steps' too: one outside the vocabulary says the file
  // was tokenised for another model.
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= x.vocab)
      throw std::invalid_argument("token file '" + opt.tokens + "': id " + std::to_string(ids[i]) + " (entry " +
                                  std::to_string(i) + (i >= need ? ", after the " + std::to_string(need) + " the import uses" : "") +
                                  ") is outside the vocabulary [0, " + std::to_string(x.vocab) +
                                  "): was the file tokenised for this model?");
  if (ids.size() > need)
    log("token file: " + std::to_string(ids.size() - need) + " ids after the first " + std::to_string(need) + " are not used");
  const std::vector<int64_t> tokens(ids.begin() + cfg.prefill, ids.begin() + int64_t(need));

  // Stage the fixture with empty caches, then fill the prefix by running the model.
  const size_t cache = size_t(int64_t(x.batch) * x.n_kv * x.max_seq * x.hd);
  std::vector<std::vector<uint16_t>> k(size_t(x.layers), std::vector<uint16_t>(cache, 0)), v = k;
  try {
    fs::create_directories(opt.out);
  } catch (const fs::filesystem_error& e) {
    throw std::invalid_argument("--out " + opt.out + " cannot be made a folder: " + e.code().message());
  }
  // One import at a time into a folder (two at once each reported a fixture and left one): the lock,
  // then the folder checked again under it.
  const FolderLock lock(opt.out, {}, /*wait=*/false);
  if (lock.busy())
    throw std::invalid_argument("--out " + opt.out + ": another nibble is writing a fixture into it; name another folder");
  check_import_out(opt.out, opt.checkpoint, /*locked=*/true);
  const std::string staged_path = (fs::path(opt.out) / kStagingFile).string();
  struct RemoveStaging {
    std::string path;
    ~RemoveStaging() {
      std::error_code ec;
      fs::remove(path, ec);
    }
  } remove_staging{staged_path};
  write_safetensors(staged_path, fixture_views(m, k, v, tokens), fixture_metadata(kDecodeTask, cfg.name, 0));
  std::string how;
  {
    const SafetensorsFile staged(staged_path);
    const std::string path = opt.path == "auto" ? (gpu_answers() ? "gpu" : "cpu") : opt.path;
    if (path == "gpu") {
      if (opt.reference.empty()) throw std::invalid_argument("--path gpu needs the decode reference .so");
      log("KV prefix: " + std::to_string(cfg.prefill) + " steps of the fp32 reference " + opt.reference);
      prefix_on_gpu(cfg, staged, opt.reference, ids, k, v);
      how = "the decode reference " + fs::absolute(opt.reference).lexically_normal().string() + " (SHA-256 " +
            sha256_file_hex(opt.reference) + "), one decode_step per id at positions 0.." + std::to_string(cfg.prefill - 1) +
            ", its bf16 cache";
    } else {
      double macs = 0;
      for (const auto& w : cfg.quant_weights()) macs += double(w.out) * double(w.in);
      macs *= cfg.prefill;
      if (macs > kImportCpuMaxMacs)
        throw std::invalid_argument("the fp64 oracle over " + std::to_string(cfg.prefill) + " prefix ids of config " +
                                    cfg.name + " is " + std::to_string(macs) + " multiply-adds (hours on a CPU): run it where a GPU "
                                    "answers (--path gpu)");
      const int threads = opt.threads > 0 ? opt.threads : int(std::max(1u, std::thread::hardware_concurrency()));
      log("KV prefix: " + std::to_string(cfg.prefill) + " steps of the fp64 oracle on " + std::to_string(threads) + " threads");
      oracle::DecodeOracle o(cfg, staged, threads);
      for (int pos = 0; pos < cfg.prefill; ++pos) o.step({ids[size_t(pos)]}, pos);
      for (int l = 0; l < x.layers; ++l) {
        k[size_t(l)] = o.k_cache(l);
        v[size_t(l)] = o.v_cache(l);
      }
      how = "the fp64 oracle (the task's definition; K and V rounded once to bf16 as written), one step per id at "
            "positions 0.." + std::to_string(cfg.prefill - 1);
    }
  }

  nlohmann::ordered_json source = m.source;
  source["tokens"] = {{"file", fs::absolute(opt.tokens).lexically_normal().string()},
                      {"sha256", sha256_file_hex(opt.tokens)},
                      {"ids_in_file", ids.size()},
                      {"prefix_ids", cfg.prefill},
                      {"decode_ids", cfg.decode_steps}};
  source["kv_prefix"] = how;
  log("writing the fixture into " + opt.out);
  return make_fixture(kDecodeTask, cfg.name, 0, opt.out, opt.threads, {},
                      [&](int) {
                        FixtureImage img;
                        img.views = fixture_views(m, k, v, tokens);
                        img.meta = fixture_metadata(kDecodeTask, cfg.name, 0);
                        img.meta["source"] = "import";
                        img.meta["source_sha256"] = fixture_source_sha256(source);
                        return img;
                      },
                      source);
}

}  // namespace nibble
