// dataflow_plan.cpp: the dataflow megakernel's per-CTA schedule (dataflow_plan.h).
#include "dataflow_plan.h"

#include <algorithm>
#include <stdexcept>

namespace nibble::megakernel::dataflow {

const char* seg_kind_name(SegKind k) {
  static const char* const names[kSegKinds] = {"qkv", "attention", "o", "gate|up", "down", "head"};
  return k >= 0 && k < kSegKinds ? names[k] : "?";
}

int Plan::rows(SegKind k) const {
  const ModelShape& s = shape;
  switch (k) {
    case kQkv: return (s.n_q + 2 * s.n_kv) * s.hd;
    case kO:
    case kDown: return s.d;
    case kGu: return 2 * s.ffn;
    case kHead: return s.vocab;
    default: return 0;
  }
}

int Plan::inputs(SegKind k) const {
  const ModelShape& s = shape;
  switch (k) {
    case kO: return s.n_q * s.hd;
    case kDown: return s.ffn;
    case kQkv:
    case kGu:
    case kHead: return s.d;
    default: return 0;
  }
}

void cluster_tiles(int tiles, int clusters, int c, int* t0, int* t1) {
  *t0 = int((long long)tiles * c / clusters);
  *t1 = int((long long)tiles * (c + 1) / clusters);
}

int Plan::owner(SegKind k, int tile) const {
  const int tiles = (rows(k) + kTileRows - 1) / kTileRows;
  // the largest c with c T / C <= tile, i.e. ((tile + 1) C - 1) / T
  return int(((long long)(tile + 1) * clusters - 1) / tiles);
}

long long Segment::weight_bytes() const {
  return kind == kAttn ? 0 : (long long)(tile1 - tile0) * (g1 - g0) * kUnitBytes;
}

std::string plan_unsupported(const ModelShape& s, int clusters) {
  if (s.n_layers < 1 || s.d < 1 || s.ffn < 1 || s.n_q < 1 || s.n_kv < 1 || s.hd < 1 || s.vocab < 1)
    return "every dimension must be positive";
  if (clusters < 1) return "at least one cluster of " + std::to_string(kClusterSize) + " CTAs";
  if (s.d % kGroupK || s.ffn % kGroupK || (s.n_q * s.hd) % kGroupK)
    return "d, ffn and n_q x hd must be multiples of the group (128)";
  if (s.n_q % s.n_kv) return "n_q must be a multiple of n_kv (GQA)";
  if (s.hd % kTileRows) return "hd must be a multiple of 16 (a KV head's rows are whole tiles)";
  if (s.ffn % 8) return "ffn must be a multiple of 8 (gate|up's Interleave8 tiles)";
  if (s.n_kv > clusters * kClusterSize) return "more KV heads than CTAs: every KV head needs an attention item";
  return "";
}

namespace {

/** The clusters owning rows [a, b) of matrix kind k, appended to w (merged with the last range when
 *  they touch: a KV head's q, k and v rows may share clusters). */
void add_rows(const Plan& p, SegKind k, int layer, int a, int b, std::vector<Wait>* w) {
  const int lo = p.owner(k, a / kTileRows), hi = p.owner(k, (b - 1) / kTileRows) + 1;
  if (!w->empty() && w->back().source == k && w->back().layer == layer && lo <= w->back().hi) {
    w->back().hi = std::max(w->back().hi, hi);
    return;
  }
  w->push_back(Wait{k, layer, lo, hi});
}

}  // namespace

Plan make_plan(const ModelShape& s, int clusters) {
  if (const std::string why = plan_unsupported(s, clusters); !why.empty())
    throw std::invalid_argument("dataflow plan: " + why);
  Plan p;
  p.shape = s;
  p.clusters = clusters;
  const int ctas = clusters * kClusterSize, rep = s.n_q / s.n_kv;
  p.attn_chunks = std::max(1, ctas / s.n_kv);
  p.segments.assign(size_t(ctas), {});
  for (int cta = 0; cta < ctas; ++cta) {
    const int c = cta / kClusterSize, r = cta % kClusterSize;
    std::vector<Segment>& out = p.segments[size_t(cta)];
    auto matrix = [&](SegKind k, int layer, std::vector<Wait> waits) {
      Segment g;
      g.kind = k;
      g.layer = layer;
      cluster_tiles((p.rows(k) + kTileRows - 1) / kTileRows, clusters, c, &g.tile0, &g.tile1);
      const int groups = p.inputs(k) / kGroupK;
      g.g0 = groups * r / kClusterSize;
      g.g1 = groups * (r + 1) / kClusterSize;
      g.waits = std::move(waits);
      out.push_back(std::move(g));
      return &out.back();
    };
    for (int l = 0; l < s.n_layers; ++l) {
      // qkv reads RMSNorm(h): every row of the previous layer's down (layer 0: the embedding).
      matrix(kQkv, l, l == 0 ? std::vector<Wait>{} : std::vector<Wait>{{kDown, l - 1, 0, clusters}});
      // One attention item per CTA at most: KV head cta / chunks, chunk cta % chunks; it reads the
      // rows of its query heads, its K and its V.
      if (cta < s.n_kv * p.attn_chunks) {
        Segment a;
        a.kind = kAttn;
        a.layer = l;
        a.kv_head = cta / p.attn_chunks;
        a.chunk = cta % p.attn_chunks;
        a.chunks = p.attn_chunks;
        const int h = a.kv_head, q0 = h * rep * s.hd, k0 = s.n_q * s.hd + h * s.hd, v0 = (s.n_q + s.n_kv) * s.hd + h * s.hd;
        add_rows(p, kQkv, l, q0, q0 + rep * s.hd, &a.waits);
        add_rows(p, kQkv, l, k0, k0 + s.hd, &a.waits);
        add_rows(p, kQkv, l, v0, v0 + s.hd, &a.waits);
        out.push_back(std::move(a));
      }
      // o's groups [g0, g1) are attention outputs [128 g0, 128 g1): whole query heads' KV heads.
      Segment* o = matrix(kO, l, {});
      const int qh0 = o->g0 * kGroupK / s.hd, qh1 = (o->g1 * kGroupK + s.hd - 1) / s.hd;
      if (o->g1 > o->g0) o->waits.push_back(Wait{kAttn, l, qh0 / rep, (qh1 + rep - 1) / rep});
      matrix(kGu, l, {{kO, l, 0, clusters}});  // RMSNorm(h) after o: every row
      // down's groups [g0, g1) are ffn inputs [128 g0, 128 g1): gate|up tiles [16 g0, 16 g1)
      // (Interleave8: tile t holds gate and up rows 8t .. 8t + 7).
      Segment* dn = matrix(kDown, l, {});
      if (dn->g1 > dn->g0) add_rows(p, kGu, l, 2 * kGroupK * dn->g0, 2 * kGroupK * dn->g1, &dn->waits);
    }
    matrix(kHead, s.n_layers - 1, {{kDown, s.n_layers - 1, 0, clusters}});
  }
  return p;
}

}  // namespace nibble::megakernel::dataflow
