// model_host.cpp: the host side both megakernel solutions share (model_host.h).
#include "model_host.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "solutions/common/abi_util.h"

namespace nibble::megakernel::host {

using sol::AbiFailure;

namespace {

[[noreturn]] void fail(nibble_status s, const std::string& msg) { throw AbiFailure(s, msg); }

SourceTriple source(const nibble_decode_model* m, const std::string& name, int64_t out, int64_t in) {
  const sol::QuantTriple t = sol::require_quant(m, name, out, in);
  SourceTriple s;
  s.packed = t.packed;
  s.scale = t.scale;
  s.zero = t.zero;
  s.rows = int(out);
  return s;
}

/** What this solution's kernels support beyond the task's requirements (sol::require_decode_model). */
void validate_config(const nibble_decode_config& c, UnsupportedFn unsupported) {
  const std::string why = unsupported(c);
  if (!why.empty()) fail(NIBBLE_ERR_NOT_SUPPORTED, why);
  if (int64_t(c.vocab) + 16 > (1ll << 30) || int64_t(c.ffn) * 2 > (1ll << 30))
    fail(NIBBLE_ERR_NOT_SUPPORTED, "config too large for this solution's 32-bit row indexing");
}

void require_aligned(const void* p, const std::string& name) {
  if (reinterpret_cast<uintptr_t>(p) % 16)
    fail(NIBBLE_ERR_INVALID_ARGUMENT, "tensor '" + name + "' is not 16-byte aligned");
}

}  // namespace

void DeviceAlloc::allocate(size_t bytes) {
  if (ptr_) throw AbiFailure(NIBBLE_ERR_INTERNAL, "DeviceAlloc::allocate called twice");
  if (bytes) SOL_CUDA(cudaMalloc(&ptr_, bytes));
  size_ = bytes;
}

DeviceAlloc::~DeviceAlloc() {
  if (ptr_) cudaFree(ptr_);
}

void DeviceAlloc::release() {
  void* p = ptr_;
  ptr_ = nullptr;
  size_ = 0;
  if (p) SOL_CUDA(cudaFree(p));
}

ModelSources model_sources(const nibble_decode_model* model, UnsupportedFn unsupported) {
  sol::require_decode_model(model);
  const nibble_decode_config& c = model->cfg;
  validate_config(c, unsupported);
  const int qdim = c.n_q * c.hd, kvdim = c.n_kv * c.hd;
  ModelSources m;
  m.embed = source(model, "embed", c.vocab, c.d);
  m.final_norm = static_cast<const uint16_t*>(sol::require_tensor(model, "final_norm", sol::kBF16, {c.d}));
  require_aligned(m.final_norm, "final_norm");
  m.layers.resize(size_t(c.layers));
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    LayerSources& s = m.layers[size_t(i)];
    s.q = source(model, p + "q", qdim, c.d);
    s.k = source(model, p + "k", kvdim, c.d);
    s.v = source(model, p + "v", kvdim, c.d);
    s.o = source(model, p + "o", c.d, qdim);
    s.gate = source(model, p + "gate", c.ffn, c.d);
    s.up = source(model, p + "up", c.ffn, c.d);
    s.down = source(model, p + "down", c.d, c.ffn);
    s.in_norm = static_cast<const uint16_t*>(sol::require_tensor(model, p + "in_norm", sol::kBF16, {c.d}));
    s.post_norm = static_cast<const uint16_t*>(sol::require_tensor(model, p + "post_norm", sol::kBF16, {c.d}));
    require_aligned(s.in_norm, p + "in_norm");  // read as 4 bf16 per load
    require_aligned(s.post_norm, p + "post_norm");
    const std::string kv = "kv." + std::to_string(i) + ".";
    const std::vector<int64_t> kv_shape{c.batch, c.n_kv, c.max_seq, c.hd};
    s.k_cache = static_cast<uint16_t*>(sol::require_tensor(model, kv + "k", sol::kBF16, kv_shape));
    s.v_cache = static_cast<uint16_t*>(sol::require_tensor(model, kv + "v", sol::kBF16, kv_shape));
    require_aligned(s.k_cache, kv + "k");
    require_aligned(s.v_cache, kv + "v");
  }
  return m;
}

void require_sm90() {
  int dev = 0, major = 0, minor = 0;
  SOL_CUDA(cudaGetDevice(&dev));
  SOL_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  SOL_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major != 9 || minor != 0)
    fail(NIBBLE_ERR_NOT_SUPPORTED, "this solution is built for sm_90a (Hopper: H100/H200) only; the device is sm_" +
                                       std::to_string(major) + std::to_string(minor));
}

void repack_all(std::vector<RepackJob>& jobs, DeviceAlloc& weights, cudaStream_t stream) {
  const auto rows_of = [](const RepackJob& j) {
    int rows = 0;
    for (const SourceTriple& s : j.src) rows += s.rows;
    return rows;
  };
  std::vector<size_t> sizes;
  for (const RepackJob& j : jobs) sizes.push_back(packed_weight_bytes(rows_of(j), j.k));
  const std::vector<char*> w = carve(weights, sizes);
  for (size_t i = 0; i < jobs.size(); ++i) {
    RepackJob& job = jobs[i];
    const int rows = rows_of(job);
    job.dst->w = reinterpret_cast<const uint4*>(w[i]);
    job.dst->tiles = (rows + kTileRows - 1) / kTileRows;
    job.dst->groups = job.k / kGroup;
    job.dst->rows = rows;
    job.dst->chunk = job.chunk > 0 ? job.chunk : job.dst->groups;
    if (!gemv_plan_fits(*job.dst))
      fail(NIBBLE_ERR_NOT_SUPPORTED, "a projection of " + std::to_string(rows) + " rows x " + std::to_string(job.k) +
                                         " inputs has too many 16 x 128 units for the GEMV's 32-bit unit counts");
    SOL_CUDA(launch_repack(job.src.data(), int(job.src.size()), job.map, job.k, reinterpret_cast<uint4*>(w[i]), stream,
                           job.chunk));
  }
}

std::vector<char*> carve(DeviceAlloc& a, const std::vector<size_t>& sizes) {
  size_t total = 0;
  for (size_t s : sizes) total += round_up(s, 256);
  a.allocate(total);
  std::vector<char*> out;
  size_t off = 0;
  for (size_t s : sizes) {
    out.push_back(a.get() + off);
    off += round_up(s, 256);
  }
  return out;
}

FILE* open_trace(const std::string& path, const char* var) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f)
    std::fprintf(stderr, "%s=%s cannot be written (%s); under nibble grade the solution's sandbox writes only files that "
                 "exist under /dev: make the file first (: > /dev/shm/trace.txt) and give that path\n", var, path.c_str(),
                 std::strerror(errno));
  return f;
}

std::vector<float2> rope_table(const nibble_decode_config& c) {
  const int half = int(c.hd / 2);
  std::vector<float2> rope(size_t(c.max_seq) * half);
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) inv_freq[size_t(i)] = std::pow(c.theta, -2.0 * i / c.hd);
  for (int pos = 0; pos < c.max_seq; ++pos)
    for (int i = 0; i < half; ++i) {
      const double ang = double(pos) * inv_freq[size_t(i)];
      rope[size_t(pos) * half + i] = make_float2(float(std::cos(ang)), float(std::sin(ang)));
    }
  return rope;
}

StepIo step_io(const nibble_decode_config& c, const nibble_tensor* token_ids, int32_t pos, nibble_tensor* logits) {
  if (!token_ids || !logits) fail(NIBBLE_ERR_INVALID_ARGUMENT, "decode_step: token_ids and logits must not be NULL");
  if (token_ids->dtype.code != NIBBLE_DTYPE_INT || token_ids->dtype.bits != 64 || token_ids->ndim != 1 ||
      token_ids->shape[0] != c.batch || token_ids->device.device_type != NIBBLE_DEVICE_CUDA)
    fail(NIBBLE_ERR_INVALID_ARGUMENT, "decode_step: token_ids must be (" + std::to_string(c.batch) +
                                          ",) int64 on the GPU, got " + sol::dtype_str(token_ids->dtype) + " " +
                                          sol::shape_str(token_ids->shape, token_ids->ndim));
  if (logits->dtype.code != NIBBLE_DTYPE_FLOAT || logits->dtype.bits != 32 || logits->ndim != 2 ||
      logits->shape[0] != c.batch || logits->shape[1] != c.vocab || logits->device.device_type != NIBBLE_DEVICE_CUDA)
    fail(NIBBLE_ERR_INVALID_ARGUMENT, "decode_step: logits must be (" + std::to_string(c.batch) + ", " +
                                          std::to_string(c.vocab) + ") fp32 on the GPU, got " +
                                          sol::dtype_str(logits->dtype) + " " + sol::shape_str(logits->shape, logits->ndim));
  if (pos < 0 || pos >= c.max_seq)
    fail(NIBBLE_ERR_INVALID_ARGUMENT, "decode_step: pos " + std::to_string(pos) + " outside [0, max_seq = " +
                                          std::to_string(c.max_seq) + ")");
  StepIo io;
  io.tokens = reinterpret_cast<const int64_t*>(static_cast<const char*>(token_ids->data) + token_ids->byte_offset);
  io.logits = reinterpret_cast<float*>(static_cast<char*>(logits->data) + logits->byte_offset);
  return io;
}

}  // namespace nibble::megakernel::host
