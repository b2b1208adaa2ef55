//===- ReferenceModel.cpp - Naive fp64 reference of the MoD forward -------===//
//
// Follows docs/model-format.md literally, one loop per formula, in double.
// Clarity beats speed here: the shapes the tests use are small.
//
//===----------------------------------------------------------------------===//

#include "ReferenceModel.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <thread>

using nlohmann::json;

namespace modref {

namespace {

//===----------------------------------------------------------------------===//
// Description parsing
//===----------------------------------------------------------------------===//

[[noreturn]] void fail(const std::string &key, const std::string &why) {
  throw ReferenceError("model description: key '" + key + "': " + why);
}

int64_t getInt(const json &j, const std::string &key, const std::string &path) {
  if (!j.contains(key))
    fail(path + key, "missing");
  const json &v = j.at(key);
  if (!v.is_number_integer())
    fail(path + key, "expected an integer");
  return v.get<int64_t>();
}

double getNumber(const json &j, const std::string &key, const std::string &path,
                 double def) {
  if (!j.contains(key))
    return def;
  const json &v = j.at(key);
  if (!v.is_number())
    fail(path + key, "expected a number");
  return v.get<double>();
}

std::string getString(const json &j, const std::string &key,
                      const std::string &path, const std::string &def) {
  if (!j.contains(key))
    return def;
  const json &v = j.at(key);
  if (!v.is_string())
    fail(path + key, "expected a string");
  return v.get<std::string>();
}

void rejectUnknownKeys(const json &j, const std::set<std::string> &known,
                       const std::string &path) {
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known.count(it.key()))
      fail(path + it.key(), "unknown key");
}

/// A schedule (`mod.schedule`, `moe.schedule`): the chosen layers.
std::vector<bool> parseSchedule(const json &obj, const std::string &path,
                                int64_t nLayers, const std::string &def) {
  std::vector<bool> on(nLayers, false);
  const std::string key = path + "schedule";
  if (obj.contains("schedule") && obj.at("schedule").is_array()) {
    for (const json &e : obj.at("schedule")) {
      if (!e.is_number_integer())
        fail(key, "layer indices must be integers");
      int64_t l = e.get<int64_t>();
      if (l < 0 || l >= nLayers)
        fail(key, "layer index " + std::to_string(l) + " out of range");
      if (on[l])
        fail(key, "layer index " + std::to_string(l) + " listed twice");
      on[l] = true;
    }
    return on;
  }
  std::string s = getString(obj, "schedule", path, def);
  for (int64_t l = 0; l < nLayers; ++l) {
    if (s == "every_other")
      on[l] = (l % 2) == 1;
    else if (s == "all")
      on[l] = true;
    else if (s == "none")
      on[l] = false;
    else
      fail(key, "expected 'every_other', 'all', 'none' or a list of layers");
  }
  return on;
}

//===----------------------------------------------------------------------===//
// Small dense helpers, row-major, double
//===----------------------------------------------------------------------===//

/// y[r, o] = sum_i x[r, i] * w[o, i] (PyTorch nn.Linear layout, no bias).
std::vector<double> linear(const std::vector<double> &x, int64_t rows,
                           int64_t in, const std::vector<double> &w,
                           int64_t out) {
  std::vector<double> y(rows * out, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0.0;
      for (int64_t i = 0; i < in; ++i)
        acc += x[r * in + i] * w[o * in + i];
      y[r * out + o] = acc;
    }
  return y;
}

/// x rounded to bf16: 8 significant bits, to nearest with ties to even
/// (the default rounding mode of nearbyint). The bf16 exponent range covers
/// every value these models produce.
double roundBf16(double x) {
  if (x == 0.0 || !std::isfinite(x))
    return x;
  int e;
  const double m = std::frexp(x, &e); // x = m 2^e, 0.5 <= |m| < 1
  return std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8);
}

/// linear() with both operands rounded to bf16 first when `bf16`.
std::vector<double> product(bool bf16, std::vector<double> x, int64_t rows,
                            int64_t in, std::vector<double> w, int64_t out) {
  if (bf16) {
    for (double &v : x)
      v = roundBf16(v);
    for (double &v : w)
      v = roundBf16(v);
  }
  return linear(x, rows, in, w, out);
}

/// RMSNorm(x; w) = x / sqrt(mean(x^2) + eps) * w, per row.
std::vector<double> rmsNorm(const std::vector<double> &x, int64_t rows,
                            int64_t d, const std::vector<double> &w,
                            double eps) {
  std::vector<double> y(rows * d);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < d; ++i)
      ss += x[r * d + i] * x[r * d + i];
    double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
    for (int64_t i = 0; i < d; ++i)
      y[r * d + i] = x[r * d + i] * inv * w[i];
  }
  return y;
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }
double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

/// Rotate-half RoPE in place on one head vector v[0..hd) at position p.
void applyRope(double *v, int64_t hd, int64_t p, double theta) {
  int64_t half = hd / 2;
  for (int64_t j = 0; j < half; ++j) {
    double freq = std::pow(theta, -2.0 * static_cast<double>(j) /
                                      static_cast<double>(hd));
    double a = static_cast<double>(p) * freq;
    double c = std::cos(a), s = std::sin(a);
    double lo = v[j], hi = v[j + half];
    v[j] = lo * c - hi * s;
    v[j + half] = hi * c + lo * s;
  }
}

/// Looks up a weight and checks its size.
const std::vector<double> &weight(const Weights &weights,
                                  const std::string &name, size_t size) {
  auto it = weights.find(name);
  if (it == weights.end())
    throw ReferenceError("missing weight '" + name + "'");
  if (it->second.size() != size)
    throw ReferenceError("weight '" + name + "' has " +
                         std::to_string(it->second.size()) +
                         " elements, expected " + std::to_string(size));
  return it->second;
}

/// The MLP of docs/model-format.md section 3 on `n` rows `n2` of width d,
/// with the weights under `prefix` (`blocks.{l}.mlp.` or an expert's
/// `blocks.{l}.moe.experts.{e}.`) and hidden width ff.
std::vector<double> mlpRows(const ModelConfig &c, const Weights &w,
                            const std::string &prefix,
                            const std::vector<double> &n2, int64_t n,
                            int64_t ff) {
  const int64_t d = c.dModel;
  std::vector<double> up =
      product(c.bf16, n2, n, d, weight(w, prefix + "w_up.weight", ff * d), ff);
  std::vector<double> act(n * ff);
  if (c.mlp == Mlp::SwiGLU) {
    std::vector<double> gate = product(
        c.bf16, n2, n, d, weight(w, prefix + "w_gate.weight", ff * d), ff);
    for (int64_t i = 0; i < n * ff; ++i)
      act[i] = silu(gate[i]) * up[i];
  } else {
    for (int64_t i = 0; i < n * ff; ++i)
      act[i] = gelu(up[i]);
  }
  return product(c.bf16, act, n, ff,
                 weight(w, prefix + "w_down.weight", d * ff), d);
}

/// One MoE MLP (docs/model-format.md section 7) on the rows of one sequence
/// that reach it, in position order: its running state and its decisions.
struct MoeRun {
  /// In/out: per real expert, the tokens of this sequence kept so far.
  std::vector<int64_t> counts;
  /// The expert capacity C.
  int64_t capacity = 0;
  /// Optional, per row: decisions to use instead of the natural ones.
  std::vector<int32_t> fixedExpert, fixedKept;
  /// Out, per row: the decisions used, p_i (n x (E+N)) and n_i (n x d).
  std::vector<int32_t> expert, kept;
  std::vector<double> probs, inputs;
  /// Out: whether the natural decisions differ from the fixed ones.
  bool differs = false;
};

/// m_i = p_i[e_i] Expert_{e_i}(n_i) for kept rows, 0 otherwise.
std::vector<double> moeRows(const ModelConfig &c, const Weights &w,
                            int64_t layer, const std::vector<double> &n2,
                            int64_t n, MoeRun &run) {
  const int64_t d = c.dModel, E = c.nExperts, K = c.nExperts + c.noopExperts;
  const std::string p = "blocks." + std::to_string(layer) + ".moe.";
  // The router is f32 in a bf16 model, like the MoD router (section 1).
  std::vector<double> z =
      linear(n2, n, d, weight(w, p + "router.weight", K * d), K);
  run.inputs = n2;
  run.probs.assign(n * K, 0.0);
  run.expert.assign(n, -1);
  run.kept.assign(n, 0);
  const bool fixed = !run.fixedExpert.empty();
  for (int64_t i = 0; i < n; ++i) {
    double *pi = &run.probs[i * K];
    double mx = -INFINITY;
    for (int64_t e = 0; e < K; ++e)
      mx = std::max(mx, z[i * K + e]);
    double sum = 0.0;
    for (int64_t e = 0; e < K; ++e)
      sum += (pi[e] = std::exp(z[i * K + e] - mx));
    for (int64_t e = 0; e < K; ++e)
      pi[e] /= sum;
    // argmax p_i, ties to the lower index.
    int32_t best = 0;
    for (int64_t e = 1; e < K; ++e)
      if (pi[e] > pi[best])
        best = static_cast<int32_t>(e);
    // Kept iff a real expert with fewer than C earlier kept tokens.
    int32_t keep = 0;
    if (best < E && run.counts[best] < run.capacity) {
      keep = 1;
      ++run.counts[best];
    }
    if (fixed) {
      if (best != run.fixedExpert[i] || keep != run.fixedKept[i])
        run.differs = true;
      best = run.fixedExpert[i];
      keep = run.fixedKept[i];
    }
    run.expert[i] = best;
    run.kept[i] = keep;
  }
  std::vector<double> m(n * d, 0.0);
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t> rows;
    for (int64_t i = 0; i < n; ++i)
      if (run.kept[i] && run.expert[i] == e)
        rows.push_back(i);
    if (rows.empty())
      continue;
    const int64_t r = static_cast<int64_t>(rows.size());
    std::vector<double> xe(r * d);
    for (int64_t s = 0; s < r; ++s)
      for (int64_t k = 0; k < d; ++k)
        xe[s * d + k] = n2[rows[s] * d + k];
    std::vector<double> y = mlpRows(
        c, w, p + "experts." + std::to_string(e) + ".", xe, r, c.dExpert);
    for (int64_t s = 0; s < r; ++s) {
      const double pe = run.probs[rows[s] * K + e];
      for (int64_t k = 0; k < d; ++k)
        m[rows[s] * d + k] = pe * y[s * d + k];
    }
  }
  return m;
}

/// The attention sublayer on `n` rows `x` (one sequence, ascending original
/// positions `pos`): a = Attn(RMSNorm(x)).
std::vector<double> attention(const ModelConfig &c, const Weights &w,
                              int64_t layer, const std::vector<double> &x,
                              const std::vector<int64_t> &pos) {
  const int64_t n = static_cast<int64_t>(pos.size());
  const int64_t d = c.dModel, h = c.nHeads, hd = c.headDim();
  // Grouped-query attention: kvh key/value heads of hd, query head `head`
  // reads key/value head head / (h / kvh) (docs/model-format.md section 3).
  const int64_t kvh = c.nKvHeads, kvd = kvh * hd, group = h / kvh;
  const std::string p = "blocks." + std::to_string(layer) + ".";
  auto W = [&](const std::string &name, size_t size) -> const auto & {
    return weight(w, p + name, size);
  };

  std::vector<double> n1 =
      rmsNorm(x, n, d, W("attn_norm.weight", d), c.normEps);
  std::vector<double> q =
      product(c.bf16, n1, n, d, W("attn.wq.weight", d * d), d);
  std::vector<double> k =
      product(c.bf16, n1, n, d, W("attn.wk.weight", kvd * d), kvd);
  std::vector<double> v =
      product(c.bf16, n1, n, d, W("attn.wv.weight", kvd * d), kvd);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t head = 0; head < h; ++head)
      applyRope(&q[i * d + head * hd], hd, pos[i], c.ropeTheta);
    for (int64_t head = 0; head < kvh; ++head)
      applyRope(&k[i * kvd + head * hd], hd, pos[i], c.ropeTheta);
  }
  if (c.bf16) // attention reads bf16 queries, keys and values
    for (std::vector<double> *t : {&q, &k, &v})
      for (double &e : *t)
        e = roundBf16(e);
  std::vector<double> o(n * d, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> scores(n);
  for (int64_t head = 0; head < h; ++head)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t kvHead = head / group;
      double mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        if (pos[j] > pos[i]) {
          scores[j] = -INFINITY;
          continue;
        }
        double s = 0.0;
        for (int64_t t = 0; t < hd; ++t)
          s += q[i * d + head * hd + t] * k[j * kvd + kvHead * hd + t];
        scores[j] = s * scale;
        mx = std::max(mx, scores[j]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        scores[j] = pos[j] > pos[i] ? 0.0 : std::exp(scores[j] - mx);
        sum += scores[j];
      }
      for (int64_t j = 0; j < n; ++j)
        for (int64_t t = 0; t < hd; ++t)
          o[i * d + head * hd + t] +=
              scores[j] / sum * v[j * kvd + kvHead * hd + t];
    }
  return product(c.bf16, o, n, d, W("attn.wo.weight", d * d), d);
}

/// The MLP sublayer on h = x + a: m = MLP(RMSNorm(h; mlp_norm)), or the MoE
/// MLP of section 7 when `moe` is given.
std::vector<double> mlpSublayer(const ModelConfig &c, const Weights &w,
                                int64_t layer, const std::vector<double> &hres,
                                int64_t n, MoeRun *moe) {
  const int64_t d = c.dModel;
  const std::string p = "blocks." + std::to_string(layer) + ".";
  std::vector<double> n2 =
      rmsNorm(hres, n, d, weight(w, p + "mlp_norm.weight", d), c.normEps);
  if (moe)
    return moeRows(c, w, layer, n2, n, *moe);
  return mlpRows(c, w, p + "mlp.", n2, n, c.dFF);
}

/// The block body on `n` rows `x` (one sequence, ascending original positions
/// `pos`): returns a = Attn(RMSNorm(x)) and m = MLP(RMSNorm(x + a)).
void blockBody(const ModelConfig &c, const Weights &w, int64_t layer,
               const std::vector<double> &x, const std::vector<int64_t> &pos,
               std::vector<double> &a, std::vector<double> &m,
               MoeRun *moe = nullptr) {
  const int64_t n = static_cast<int64_t>(pos.size());
  a = attention(c, w, layer, x, pos);
  std::vector<double> hres(n * c.dModel);
  for (int64_t i = 0; i < n * c.dModel; ++i)
    hres[i] = x[i] + a[i];
  m = mlpSublayer(c, w, layer, hres, n, moe);
}

} // namespace

//===----------------------------------------------------------------------===//
// ModelConfig
//===----------------------------------------------------------------------===//

int64_t ModelConfig::numRoutedLayers() const {
  return std::count(routed.begin(), routed.end(), true);
}

int64_t ModelConfig::numMoeLayers() const {
  return std::count(moe.begin(), moe.end(), true);
}

int64_t ModelConfig::expertCapacity(int64_t n) const {
  const double experts = static_cast<double>(nExperts + noopExperts);
  const int64_t C = static_cast<int64_t>(
      std::ceil(capacityFactor * static_cast<double>(n) / experts));
  return std::clamp<int64_t>(C, 1, n);
}

int64_t ModelConfig::expertCapacityOfLayer(int64_t layer) const {
  if (!moe[layer])
    return 0;
  return expertCapacity(routed[layer] ? capacity : seqLen);
}

ModelConfig ModelConfig::fromJson(const json &j) {
  if (!j.is_object())
    fail("", "the model description must be a JSON object");
  rejectUnknownKeys(j,
                    {"name", "vocab_size", "d_model", "n_layers", "n_heads",
                     "n_kv_heads", "d_ff", "seq_len", "mlp", "norm_eps",
                     "rope_theta", "tie_embeddings", "dtype", "mod", "moe"},
                    "");
  ModelConfig c;
  c.name = getString(j, "name", "", "model");
  c.vocabSize = getInt(j, "vocab_size", "");
  c.dModel = getInt(j, "d_model", "");
  c.nLayers = getInt(j, "n_layers", "");
  c.nHeads = getInt(j, "n_heads", "");
  c.dFF = getInt(j, "d_ff", "");
  c.seqLen = getInt(j, "seq_len", "");
  if (c.vocabSize < 1)
    fail("vocab_size", "must be positive");
  if (c.dModel < 1)
    fail("d_model", "must be positive");
  if (c.nLayers < 0)
    fail("n_layers", "must not be negative");
  if (c.nHeads < 1)
    fail("n_heads", "must be positive");
  if (c.dFF < 1)
    fail("d_ff", "must be positive");
  if (c.seqLen < 1)
    fail("seq_len", "must be positive");
  if (c.dModel % c.nHeads != 0)
    fail("n_heads", "d_model is not divisible by n_heads");
  if (c.headDim() % 2 != 0)
    fail("n_heads", "head_dim must be even");
  c.nKvHeads =
      j.contains("n_kv_heads") ? getInt(j, "n_kv_heads", "") : c.nHeads;
  if (c.nKvHeads < 1 || c.nHeads % c.nKvHeads != 0)
    fail("n_kv_heads", "must be positive and divide n_heads");

  std::string mlp = getString(j, "mlp", "", "swiglu");
  if (mlp == "swiglu")
    c.mlp = Mlp::SwiGLU;
  else if (mlp == "gelu")
    c.mlp = Mlp::GELU;
  else
    fail("mlp", "expected 'swiglu' or 'gelu'");
  c.normEps = getNumber(j, "norm_eps", "", 1e-5);
  c.ropeTheta = getNumber(j, "rope_theta", "", 10000.0);
  if (j.contains("tie_embeddings")) {
    if (!j.at("tie_embeddings").is_boolean())
      fail("tie_embeddings", "expected a boolean");
    c.tieEmbeddings = j.at("tie_embeddings").get<bool>();
  }
  std::string dtype = getString(j, "dtype", "", "f32");
  if (dtype != "f32" && dtype != "bf16")
    fail("dtype", "expected 'f32' or 'bf16'");
  c.bf16 = dtype == "bf16";

  c.routed.assign(c.nLayers, false);
  c.moe.assign(c.nLayers, false);
  if (j.contains("moe")) {
    // docs/model-format.md section 7.
    const json &moe = j.at("moe");
    if (!moe.is_object())
      fail("moe", "expected an object");
    rejectUnknownKeys(moe,
                      {"n_experts", "noop_experts", "d_expert",
                       "capacity_factor", "balance_loss_weight", "schedule"},
                      "moe.");
    c.hasMoe = true;
    c.nExperts = getInt(moe, "n_experts", "moe.");
    if (c.nExperts < 1)
      fail("moe.n_experts", "must be >= 1");
    c.noopExperts =
        moe.contains("noop_experts") ? getInt(moe, "noop_experts", "moe.") : 0;
    if (c.noopExperts < 0)
      fail("moe.noop_experts", "must be >= 0");
    c.dExpert = getInt(moe, "d_expert", "moe.");
    if (c.dExpert < 1)
      fail("moe.d_expert", "must be positive");
    c.capacityFactor = getNumber(moe, "capacity_factor", "moe.", 1.0);
    if (!(c.capacityFactor > 0.0))
      fail("moe.capacity_factor", "must be > 0");
    c.balanceLossWeight = getNumber(moe, "balance_loss_weight", "moe.", 0.01);
    if (!(c.balanceLossWeight >= 0.0))
      fail("moe.balance_loss_weight", "must be >= 0");
    c.moe = parseSchedule(moe, "moe.", c.nLayers, "all");
  }
  if (!j.contains("mod"))
    return c;

  const json &mod = j.at("mod");
  if (!mod.is_object())
    fail("mod", "expected an object");
  rejectUnknownKeys(mod,
                    {"capacity", "capacity_tokens", "schedule", "gate",
                     "causal_router", "aux_loss_weight", "predictor_hidden"},
                    "mod.");
  c.hasMod = true;

  // Capacity: a fraction of seq_len or an explicit token count.
  if (mod.contains("capacity") && mod.contains("capacity_tokens"))
    fail("mod.capacity_tokens", "give either capacity or capacity_tokens");
  if (mod.contains("capacity_tokens")) {
    int64_t k = getInt(mod, "capacity_tokens", "mod.");
    if (k < 1 || k > c.seqLen)
      fail("mod.capacity_tokens", "must be in [1, seq_len]");
    c.capacity = k;
  } else {
    double cap = getNumber(mod, "capacity", "mod.", 0.125);
    if (!(cap > 0.0 && cap <= 1.0))
      fail("mod.capacity", "must be in (0, 1]");
    int64_t k =
        static_cast<int64_t>(std::ceil(cap * static_cast<double>(c.seqLen)));
    c.capacity = std::clamp<int64_t>(k, 1, c.seqLen);
  }

  // Schedule.
  c.routed = parseSchedule(mod, "mod.", c.nLayers, "every_other");

  std::string gate = getString(mod, "gate", "mod.", "linear");
  if (gate == "linear")
    c.gate = Gate::Linear;
  else if (gate == "sigmoid")
    c.gate = Gate::Sigmoid;
  else if (gate == "one")
    c.gate = Gate::One;
  else
    fail("mod.gate", "expected 'linear', 'sigmoid' or 'one'");

  std::string cr = getString(mod, "causal_router", "mod.", "none");
  if (cr == "aux_loss")
    c.causalRouter = CausalRouter::AuxLoss;
  else if (cr == "predictor")
    c.causalRouter = CausalRouter::Predictor;
  else if (cr == "none")
    c.causalRouter = CausalRouter::None;
  else
    fail("mod.causal_router", "expected 'aux_loss', 'predictor' or 'none'");

  c.auxLossWeight = getNumber(mod, "aux_loss_weight", "mod.", 0.01);
  c.predictorHidden = mod.contains("predictor_hidden")
                          ? getInt(mod, "predictor_hidden", "mod.")
                          : c.dModel;
  if (c.predictorHidden < 1)
    fail("mod.predictor_hidden", "must be positive");
  return c;
}

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

std::vector<std::pair<std::string, std::vector<int64_t>>>
parameterShapes(const ModelConfig &c) {
  const int64_t d = c.dModel, ff = c.dFF, v = c.vocabSize;
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  out.push_back({"embed.weight", {v, d}});
  for (int64_t l = 0; l < c.nLayers; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    out.push_back({p + "attn_norm.weight", {d}});
    const int64_t kvd = c.nKvHeads * c.headDim();
    out.push_back({p + "attn.wq.weight", {d, d}});
    out.push_back({p + "attn.wk.weight", {kvd, d}});
    out.push_back({p + "attn.wv.weight", {kvd, d}});
    out.push_back({p + "attn.wo.weight", {d, d}});
    out.push_back({p + "mlp_norm.weight", {d}});
    if (c.moe[l]) {
      // docs/model-format.md section 7: the MoE MLP replaces mlp.*.
      const int64_t F = c.dExpert;
      out.push_back({p + "moe.router.weight", {c.nExperts + c.noopExperts, d}});
      for (int64_t e = 0; e < c.nExperts; ++e) {
        const std::string q = p + "moe.experts." + std::to_string(e) + ".";
        if (c.mlp == Mlp::SwiGLU)
          out.push_back({q + "w_gate.weight", {F, d}});
        out.push_back({q + "w_up.weight", {F, d}});
        out.push_back({q + "w_down.weight", {d, F}});
      }
    } else {
      if (c.mlp == Mlp::SwiGLU)
        out.push_back({p + "mlp.w_gate.weight", {ff, d}});
      out.push_back({p + "mlp.w_up.weight", {ff, d}});
      out.push_back({p + "mlp.w_down.weight", {d, ff}});
    }
    if (c.routed[l]) {
      out.push_back({p + "router.weight", {1, d}});
      if (c.causalRouter == CausalRouter::Predictor) {
        int64_t hidden = c.predictorHidden;
        out.push_back({p + "predictor.fc1.weight", {hidden, d}});
        out.push_back({p + "predictor.fc1.bias", {hidden}});
        out.push_back({p + "predictor.fc2.weight", {1, hidden}});
        out.push_back({p + "predictor.fc2.bias", {1}});
      }
    }
  }
  out.push_back({"final_norm.weight", {d}});
  if (!c.tieEmbeddings)
    out.push_back({"lm_head.weight", {v, d}});
  return out;
}

//===----------------------------------------------------------------------===//
// Forward pass
//===----------------------------------------------------------------------===//

namespace {

/// The forward pass proper. With `fixed` (top-k mode only) routed layers use
/// that selection instead of their own top-k, which is still computed:
/// `*naturalDiffers` tells whether any layer's top-k differed from `fixed`.
/// MoE bookkeeping of one layer over the batch (docs/model-format.md
/// section 7): the decisions, p and n_i per token, and the balance loss.
struct MoeLayerRecord {
  const ModelConfig &c;
  int64_t S, K;
  std::vector<int32_t> expert, kept;
  std::vector<double> probs, inputs;
  MoeLayerRecord(const ModelConfig &c, int64_t batch)
      : c(c), S(c.seqLen), K(c.nExperts + c.noopExperts),
        expert(batch * c.seqLen, -1), kept(batch * c.seqLen, 0),
        probs(batch * c.seqLen * K, 0.0),
        inputs(batch * c.seqLen * c.dModel, 0.0) {}

  /// A fresh run for sequence b on the rows at `pos`, with the fixed
  /// decisions of layer `moeIndex` when given.
  MoeRun start(int64_t layer, int64_t b, const std::vector<int64_t> &pos,
               const MoeDecisions *fixed, size_t moeIndex) const {
    MoeRun run;
    run.counts.assign(c.nExperts, 0);
    run.capacity = c.expertCapacityOfLayer(layer);
    if (fixed) {
      if (moeIndex >= fixed->expert.size() || moeIndex >= fixed->kept.size() ||
          static_cast<int64_t>(fixed->expert[moeIndex].size()) !=
              static_cast<int64_t>(expert.size()))
        throw ReferenceError("fixed MoE decisions do not match the model");
      for (int64_t i : pos) {
        run.fixedExpert.push_back(fixed->expert[moeIndex][b * S + i]);
        run.fixedKept.push_back(fixed->kept[moeIndex][b * S + i]);
      }
    }
    return run;
  }

  void record(int64_t b, const std::vector<int64_t> &pos, const MoeRun &run) {
    const int64_t d = c.dModel;
    for (size_t s = 0; s < pos.size(); ++s) {
      const int64_t t = b * S + pos[s];
      expert[t] = run.expert[s];
      kept[t] = run.kept[s];
      for (int64_t e = 0; e < K; ++e)
        probs[t * K + e] = run.probs[s * K + e];
      for (int64_t k = 0; k < d; ++k)
        inputs[t * d + k] = run.inputs[s * d + k];
    }
  }

  /// L_bal = (E+N) sum_e frac_e mean_p_e over the tokens that reached the
  /// layer (0 when none did).
  double balance() const {
    std::vector<double> count(K, 0.0), psum(K, 0.0);
    double tokens = 0.0;
    for (size_t t = 0; t < expert.size(); ++t) {
      if (expert[t] < 0)
        continue;
      tokens += 1.0;
      count[expert[t]] += 1.0;
      for (int64_t e = 0; e < K; ++e)
        psum[e] += probs[t * K + e];
    }
    if (tokens == 0.0)
      return 0.0;
    double sum = 0.0;
    for (int64_t e = 0; e < K; ++e)
      sum += (count[e] / tokens) * (psum[e] / tokens);
    return static_cast<double>(K) * sum;
  }

  void moveInto(ReferenceOutput &out) {
    out.moeBalance.push_back(balance());
    out.moeExpert.push_back(std::move(expert));
    out.moeKept.push_back(std::move(kept));
    out.moeProbs.push_back(std::move(probs));
    out.moeInputs.push_back(std::move(inputs));
  }
};

ReferenceOutput forwardImpl(const ModelConfig &c, const Weights &w,
                            const std::vector<int32_t> &tokens, int64_t batch,
                            RouteMode mode, const Selection *fixed,
                            bool *naturalDiffers,
                            const MoeDecisions *fixedMoe = nullptr,
                            bool *moeDiffers = nullptr) {
  const int64_t S = c.seqLen, d = c.dModel, V = c.vocabSize;
  if (batch < 1)
    throw ReferenceError("batch must be at least 1");
  if (static_cast<int64_t>(tokens.size()) != batch * S)
    throw ReferenceError("expected " + std::to_string(batch * S) +
                         " tokens, got " + std::to_string(tokens.size()));
  if (mode == RouteMode::Causal && c.causalRouter == CausalRouter::None)
    throw ReferenceError(
        "mode 'causal' needs mod.causal_router 'aux_loss' or 'predictor'");

  ReferenceOutput out;
  out.logits.assign(batch * S * V, 0.0);

  // x0 = embed[t].
  const std::vector<double> &embed = weight(w, "embed.weight", V * d);
  std::vector<double> x(batch * S * d);
  for (int64_t i = 0; i < batch * S; ++i) {
    int32_t t = tokens[i];
    if (t < 0 || t >= V)
      throw ReferenceError("token " + std::to_string(t) + " out of range");
    for (int64_t e = 0; e < d; ++e)
      x[i * d + e] = embed[t * d + e];
  }

  for (int64_t l = 0; l < c.nLayers; ++l) {
    const std::string p = "blocks." + std::to_string(l) + ".";
    const size_t moeIndex = out.moeExpert.size();
    std::optional<MoeLayerRecord> moeRecord;
    if (c.moe[l])
      moeRecord.emplace(c, batch);
    // The block body, with the layer's MoE MLP when it has one.
    auto body = [&](int64_t b, const std::vector<double> &xs,
                    const std::vector<int64_t> &pos, std::vector<double> &a,
                    std::vector<double> &m) {
      if (!moeRecord) {
        blockBody(c, w, l, xs, pos, a, m);
        return;
      }
      MoeRun run = moeRecord->start(l, b, pos, fixedMoe, moeIndex);
      blockBody(c, w, l, xs, pos, a, m, &run);
      if (run.differs && moeDiffers)
        *moeDiffers = true;
      moeRecord->record(b, pos, run);
    };
    if (!c.routed[l]) {
      // Dense: y = (x + a) + m.
      for (int64_t b = 0; b < batch; ++b) {
        std::vector<double> xs(x.begin() + b * S * d,
                               x.begin() + (b + 1) * S * d);
        std::vector<int64_t> pos(S);
        std::iota(pos.begin(), pos.end(), 0);
        std::vector<double> a, m;
        body(b, xs, pos, a, m);
        for (int64_t i = 0; i < S * d; ++i)
          x[b * S * d + i] = (xs[i] + a[i]) + m[i];
      }
      if (moeRecord)
        moeRecord->moveInto(out);
      continue;
    }

    // Routed layer.
    const std::vector<double> &router = weight(w, p + "router.weight", d);
    std::vector<int32_t> mask(batch * S, 0);
    std::vector<double> rAll(batch * S, 0.0);
    std::vector<double> pAll;
    if (c.causalRouter == CausalRouter::Predictor)
      pAll.assign(batch * S, 0.0);
    const size_t routedIndex = out.routed.size();
    if (fixed &&
        (routedIndex >= fixed->size() ||
         static_cast<int64_t>((*fixed)[routedIndex].size()) != batch * S))
      throw ReferenceError("fixed selection does not match the model");
    for (int64_t b = 0; b < batch; ++b) {
      // 1. Router logits on the raw residual stream.
      std::vector<double> r(S);
      for (int64_t i = 0; i < S; ++i) {
        double acc = 0.0;
        for (int64_t e = 0; e < d; ++e)
          acc += router[e] * x[(b * S + i) * d + e];
        r[i] = acc;
        rAll[b * S + i] = acc;
      }

      // Predictor logits p on the same residual stream (they never change
      // the forward in top-k mode; the training loss of section 4 uses them).
      if (c.causalRouter == CausalRouter::Predictor) {
        const int64_t H = c.predictorHidden;
        const auto &fc1 = weight(w, p + "predictor.fc1.weight", H * d);
        const auto &b1 = weight(w, p + "predictor.fc1.bias", H);
        const auto &fc2 = weight(w, p + "predictor.fc2.weight", H);
        const auto &b2 = weight(w, p + "predictor.fc2.bias", 1);
        for (int64_t i = 0; i < S; ++i) {
          double pr = b2[0];
          for (int64_t hI = 0; hI < H; ++hI) {
            double z = b1[hI];
            for (int64_t e = 0; e < d; ++e)
              z += fc1[hI * d + e] * x[(b * S + i) * d + e];
            pr += fc2[hI] * silu(z);
          }
          pAll[b * S + i] = pr;
        }
      }

      // 2. Selection.
      std::vector<int64_t> sel;
      if (mode == RouteMode::TopK) {
        std::vector<int64_t> order(S);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
          if (r[i] != r[j])
            return r[i] > r[j];
          return i < j;
        });
        sel.assign(order.begin(), order.begin() + c.capacity);
        std::sort(sel.begin(), sel.end());
        if (fixed) {
          std::vector<int64_t> given;
          for (int64_t i = 0; i < S; ++i)
            if ((*fixed)[routedIndex][b * S + i])
              given.push_back(i);
          if (given != sel && naturalDiffers)
            *naturalDiffers = true;
          sel = std::move(given);
        }
      } else if (c.causalRouter == CausalRouter::AuxLoss) {
        for (int64_t i = 0; i < S; ++i)
          if (r[i] > 0.0)
            sel.push_back(i);
      } else {
        for (int64_t i = 0; i < S; ++i)
          if (pAll[b * S + i] > 0.0)
            sel.push_back(i);
      }
      for (int64_t i : sel)
        mask[b * S + i] = 1;
      if (sel.empty())
        continue;

      // 3. The block on the selected rows only.
      const int64_t n = static_cast<int64_t>(sel.size());
      std::vector<double> xs(n * d);
      for (int64_t s = 0; s < n; ++s)
        for (int64_t e = 0; e < d; ++e)
          xs[s * d + e] = x[(b * S + sel[s]) * d + e];
      std::vector<double> a, m;
      body(b, xs, sel, a, m);

      // 4. Gated residual for the selected; the others are untouched.
      for (int64_t s = 0; s < n; ++s) {
        double ri = r[sel[s]];
        double g = c.gate == Gate::Linear    ? ri
                   : c.gate == Gate::Sigmoid ? sigmoid(ri)
                                             : 1.0;
        for (int64_t e = 0; e < d; ++e) {
          double f = a[s * d + e] + m[s * d + e];
          x[(b * S + sel[s]) * d + e] = xs[s * d + e] + g * f;
        }
      }
    }
    if (moeRecord)
      moeRecord->moveInto(out);
    out.routed.push_back(std::move(mask));
    out.routerLogits.push_back(std::move(rAll));
    if (!pAll.empty())
      out.predictorLogits.push_back(std::move(pAll));
  }

  // logits = RMSNorm(x; final_norm) . head^T.
  std::vector<double> nf =
      rmsNorm(x, batch * S, d, weight(w, "final_norm.weight", d), c.normEps);
  const std::vector<double> &head =
      c.tieEmbeddings ? embed : weight(w, "lm_head.weight", V * d);
  out.logits = product(c.bf16, nf, batch * S, d, head, V);
  return out;
}

} // namespace

ReferenceOutput forward(const ModelConfig &c, const Weights &w,
                        const std::vector<int32_t> &tokens, int64_t batch,
                        RouteMode mode) {
  return forwardImpl(c, w, tokens, batch, mode, nullptr, nullptr);
}

ReferenceOutput decode(const ModelConfig &c, const Weights &w,
                       const std::vector<int32_t> &tokens, int64_t batch) {
  const int64_t S = c.seqLen, d = c.dModel, V = c.vocabSize;
  const int64_t h = c.nHeads, hd = c.headDim(), kvh = c.nKvHeads;
  const int64_t kvd = kvh * hd, group = h / kvh;
  if (batch < 1)
    throw ReferenceError("batch must be at least 1");
  if (static_cast<int64_t>(tokens.size()) != batch * S)
    throw ReferenceError("expected " + std::to_string(batch * S) +
                         " tokens, got " + std::to_string(tokens.size()));
  if (c.numRoutedLayers() > 0 && c.causalRouter == CausalRouter::None)
    throw ReferenceError(
        "decoding needs mod.causal_router 'aux_loss' or 'predictor'");

  ReferenceOutput out;
  out.logits.assign(batch * S * V, 0.0);
  out.routed.assign(c.numRoutedLayers(), std::vector<int32_t>(batch * S, 0));
  out.moeExpert.assign(c.numMoeLayers(), std::vector<int32_t>(batch * S, -1));
  out.moeKept.assign(c.numMoeLayers(), std::vector<int32_t>(batch * S, 0));
  const std::vector<double> &embed = weight(w, "embed.weight", V * d);
  const std::vector<double> &head =
      c.tieEmbeddings ? embed : weight(w, "lm_head.weight", V * d);
  const std::vector<double> &finalNorm = weight(w, "final_norm.weight", d);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));

  for (int64_t b = 0; b < batch; ++b) {
    // The decode state of one sequence: per layer, the positions, keys and
    // values of the tokens it ran on (RoPE applied), and per MoE layer and
    // real expert the tokens kept so far.
    struct Cache {
      std::vector<int64_t> pos;
      std::vector<double> k, v;
    };
    std::vector<Cache> cache(c.nLayers);
    std::vector<std::vector<int64_t>> kept(c.nLayers,
                                           std::vector<int64_t>(c.nExperts, 0));
    for (int64_t t = 0; t < S; ++t) {
      const int32_t tok = tokens[b * S + t];
      if (tok < 0 || tok >= V)
        throw ReferenceError("token " + std::to_string(tok) + " out of range");
      std::vector<double> x(embed.begin() + tok * d,
                            embed.begin() + (tok + 1) * d);
      size_t routedIndex = 0, moeIndex = 0;
      for (int64_t l = 0; l < c.nLayers; ++l) {
        const std::string p = "blocks." + std::to_string(l) + ".";
        bool runs = true;
        double g = 1.0;
        if (c.routed[l]) {
          // The causal decision of section 4, from this token alone.
          const std::vector<double> &router = weight(w, p + "router.weight", d);
          double r = 0.0;
          for (int64_t e = 0; e < d; ++e)
            r += router[e] * x[e];
          double score = r;
          if (c.causalRouter == CausalRouter::Predictor) {
            const int64_t H = c.predictorHidden;
            const auto &fc1 = weight(w, p + "predictor.fc1.weight", H * d);
            const auto &b1 = weight(w, p + "predictor.fc1.bias", H);
            const auto &fc2 = weight(w, p + "predictor.fc2.weight", H);
            const auto &b2 = weight(w, p + "predictor.fc2.bias", 1);
            score = b2[0];
            for (int64_t hI = 0; hI < H; ++hI) {
              double z = b1[hI];
              for (int64_t e = 0; e < d; ++e)
                z += fc1[hI * d + e] * x[e];
              score += fc2[hI] * silu(z);
            }
          }
          runs = score > 0.0;
          g = c.gate == Gate::Linear    ? r
              : c.gate == Gate::Sigmoid ? sigmoid(r)
                                        : 1.0;
          out.routed[routedIndex++][b * S + t] = runs ? 1 : 0;
        }
        const bool moe = c.moe[l];
        if (moe)
          ++moeIndex;
        if (!runs)
          continue; // a skipped token writes nothing to this layer's cache

        // Attention of this one query over the layer's cache.
        std::vector<double> n1 =
            rmsNorm(x, 1, d, weight(w, p + "attn_norm.weight", d), c.normEps);
        std::vector<double> q = product(
            c.bf16, n1, 1, d, weight(w, p + "attn.wq.weight", d * d), d);
        std::vector<double> k = product(
            c.bf16, n1, 1, d, weight(w, p + "attn.wk.weight", kvd * d), kvd);
        std::vector<double> v = product(
            c.bf16, n1, 1, d, weight(w, p + "attn.wv.weight", kvd * d), kvd);
        for (int64_t hh = 0; hh < h; ++hh)
          applyRope(&q[hh * hd], hd, t, c.ropeTheta);
        for (int64_t hh = 0; hh < kvh; ++hh)
          applyRope(&k[hh * hd], hd, t, c.ropeTheta);
        if (c.bf16)
          for (std::vector<double> *e : {&q, &k, &v})
            for (double &f : *e)
              f = roundBf16(f);
        Cache &kv = cache[l];
        kv.pos.push_back(t);
        kv.k.insert(kv.k.end(), k.begin(), k.end());
        kv.v.insert(kv.v.end(), v.begin(), v.end());
        const int64_t n = static_cast<int64_t>(kv.pos.size());
        std::vector<double> o(d, 0.0), scores(n);
        for (int64_t hh = 0; hh < h; ++hh) {
          const int64_t kvHead = hh / group;
          double mx = -INFINITY;
          for (int64_t j = 0; j < n; ++j) {
            double s = 0.0;
            for (int64_t e = 0; e < hd; ++e)
              s += q[hh * hd + e] * kv.k[j * kvd + kvHead * hd + e];
            scores[j] = s * scale;
            mx = std::max(mx, scores[j]);
          }
          double sum = 0.0;
          for (int64_t j = 0; j < n; ++j) {
            scores[j] = std::exp(scores[j] - mx);
            sum += scores[j];
          }
          for (int64_t j = 0; j < n; ++j)
            for (int64_t e = 0; e < hd; ++e)
              o[hh * hd + e] +=
                  scores[j] / sum * kv.v[j * kvd + kvHead * hd + e];
        }
        std::vector<double> a =
            product(c.bf16, o, 1, d, weight(w, p + "attn.wo.weight", d * d), d);
        std::vector<double> hres(d);
        for (int64_t e = 0; e < d; ++e)
          hres[e] = x[e] + a[e];

        // The MLP; an MoE MLP continues this sequence's running counts.
        std::vector<double> m;
        if (moe) {
          MoeRun run;
          run.counts = kept[l];
          run.capacity = c.expertCapacityOfLayer(l);
          m = mlpSublayer(c, w, l, hres, 1, &run);
          kept[l] = run.counts;
          out.moeExpert[moeIndex - 1][b * S + t] = run.expert[0];
          out.moeKept[moeIndex - 1][b * S + t] = run.kept[0];
        } else {
          m = mlpSublayer(c, w, l, hres, 1, nullptr);
        }
        for (int64_t e = 0; e < d; ++e)
          x[e] = c.routed[l] ? x[e] + g * (a[e] + m[e]) : (x[e] + a[e]) + m[e];
      }
      std::vector<double> nf = rmsNorm(x, 1, d, finalNorm, c.normEps);
      std::vector<double> z = product(c.bf16, nf, 1, d, head, V);
      std::copy(z.begin(), z.end(), out.logits.begin() + (b * S + t) * V);
    }
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Training loss
//===----------------------------------------------------------------------===//

namespace {

/// BCEWithLogits(z, y) = max(z, 0) - z y + log(1 + exp(-|z|)).
double bceWithLogits(double z, double y) {
  return std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::abs(z)));
}

/// Mean over layers of mean over (b, i) of BCEWithLogits(logit, mask).
double meanBce(const std::vector<std::vector<double>> &logits,
               const Selection &masks) {
  if (logits.empty())
    return 0.0;
  double layersSum = 0.0;
  for (size_t l = 0; l < logits.size(); ++l) {
    double sum = 0.0;
    for (size_t i = 0; i < logits[l].size(); ++i)
      sum += bceWithLogits(logits[l][i], masks[l][i] ? 1.0 : 0.0);
    layersSum += sum / static_cast<double>(logits[l].size());
  }
  return layersSum / static_cast<double>(logits.size());
}

} // namespace

LossBreakdown referenceLoss(const ModelConfig &c, const Weights &w,
                            const std::vector<int32_t> &tokens, int64_t batch,
                            const Selection *fixed,
                            const MoeDecisions *fixedMoe) {
  const int64_t S = c.seqLen, V = c.vocabSize, T = S + 1;
  if (batch < 1)
    throw ReferenceError("batch must be at least 1");
  if (static_cast<int64_t>(tokens.size()) != batch * T)
    throw ReferenceError("expected " + std::to_string(batch * T) +
                         " tokens ([batch, seq_len + 1]), got " +
                         std::to_string(tokens.size()));
  std::vector<int32_t> inputs(batch * S);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < S; ++i) {
      inputs[b * S + i] = tokens[b * T + i];
      int32_t target = tokens[b * T + i + 1];
      if (target < 0 || target >= V)
        throw ReferenceError("token " + std::to_string(target) +
                             " out of range");
    }

  LossBreakdown loss;
  ReferenceOutput out = forwardImpl(c, w, inputs, batch, RouteMode::TopK, fixed,
                                    &loss.topkDiffersFromFixed, fixedMoe,
                                    &loss.moeDiffersFromFixed);

  // Cross-entropy: mean over B * S of logsumexp(z) - z[target].
  double ceSum = 0.0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < S; ++i) {
      const double *z = &out.logits[(b * S + i) * V];
      double mx = -INFINITY;
      for (int64_t v = 0; v < V; ++v)
        mx = std::max(mx, z[v]);
      double sum = 0.0;
      for (int64_t v = 0; v < V; ++v)
        sum += std::exp(z[v] - mx);
      ceSum += mx + std::log(sum) - z[tokens[b * T + i + 1]];
    }
  loss.ce = ceSum / static_cast<double>(batch * S);

  loss.routerBce = meanBce(out.routerLogits, out.routed);
  loss.predictorBce = meanBce(out.predictorLogits, out.routed);
  loss.aux = c.causalRouter == CausalRouter::AuxLoss     ? loss.routerBce
             : c.causalRouter == CausalRouter::Predictor ? loss.predictorBce
                                                         : 0.0;
  // docs/model-format.md section 7: the mean over MoE layers of L_bal.
  if (!out.moeBalance.empty())
    loss.balance =
        std::accumulate(out.moeBalance.begin(), out.moeBalance.end(), 0.0) /
        static_cast<double>(out.moeBalance.size());
  loss.total =
      loss.ce + c.auxLossWeight * loss.aux + c.balanceLossWeight * loss.balance;
  loss.selection = std::move(out.routed);
  loss.moe.expert = std::move(out.moeExpert);
  loss.moe.kept = std::move(out.moeKept);
  return loss;
}

//===----------------------------------------------------------------------===//
// Finite-difference gradients
//===----------------------------------------------------------------------===//

bool isPredictorParameter(const std::string &name) {
  return name.rfind("blocks.", 0) == 0 &&
         name.find(".predictor.") != std::string::npos;
}

double gradientObjective(const ModelConfig &c, const LossBreakdown &loss,
                         const std::string &name) {
  if (isPredictorParameter(name))
    return c.auxLossWeight * loss.predictorBce;
  double obj = loss.ce + c.balanceLossWeight * loss.balance;
  if (c.causalRouter == CausalRouter::AuxLoss)
    obj += c.auxLossWeight * loss.routerBce;
  return obj;
}

FdGradient referenceGradient(const ModelConfig &c, const Weights &weights,
                             const std::vector<int32_t> &tokens, int64_t batch,
                             const FdOptions &opt) {
  FdGradient fd;
  fd.base = referenceLoss(c, weights, tokens, batch);
  const Selection &held = fd.base.selection;
  const MoeDecisions &heldMoe = fd.base.moe;

  // The work list: (tensor, coordinate, step).
  struct Item {
    std::string name;
    int64_t index;
    double step;
  };
  std::vector<Item> items;
  std::mt19937_64 gen(opt.seed * 0x9E3779B97F4A7C15ull + 99);
  for (const auto &entry : parameterShapes(c)) {
    const std::string &name = entry.first;
    auto it = weights.find(name);
    if (it == weights.end())
      throw ReferenceError("missing weight '" + name + "'");
    const std::vector<double> &t = it->second;
    const int64_t n = static_cast<int64_t>(t.size());
    double ss = 0.0;
    for (double e : t)
      ss += e * e;
    const double rms = n ? std::sqrt(ss / static_cast<double>(n)) : 0.0;

    std::vector<int64_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    if (opt.coordsPerTensor > 0 && n > opt.coordsPerTensor) {
      // Partial Fisher-Yates: the first coordsPerTensor entries.
      for (int64_t i = 0; i < opt.coordsPerTensor; ++i) {
        std::uniform_int_distribution<int64_t> pick(i, n - 1);
        std::swap(idx[i], idx[pick(gen)]);
      }
      idx.resize(opt.coordsPerTensor);
      std::sort(idx.begin(), idx.end());
    }
    fd.grad[name].assign(n, std::numeric_limits<double>::quiet_NaN());
    for (int64_t i : idx) {
      double scale = std::max(std::abs(t[i]), rms);
      if (scale == 0.0)
        scale = 1.0;
      items.push_back({name, i, opt.relStep * scale});
    }
    fd.coords[name] = std::move(idx);
  }

  // Workers, each on its own copy of the weights.
  int threads = opt.threads > 0
                    ? opt.threads
                    : static_cast<int>(std::thread::hardware_concurrency());
  threads = std::max(1, std::min<int>(threads, static_cast<int>(items.size())));
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::exception_ptr error;
  auto work = [&]() {
    try {
      Weights w = weights;
      for (size_t k = next++; k < items.size(); k = next++) {
        const Item &item = items[k];
        double &slot = w.at(item.name)[item.index];
        const double theta = slot;
        const double plus = theta + item.step, minus = theta - item.step;
        slot = plus;
        LossBreakdown lp = referenceLoss(c, w, tokens, batch, &held, &heldMoe);
        slot = minus;
        LossBreakdown lm = referenceLoss(c, w, tokens, batch, &held, &heldMoe);
        slot = theta;
        // Divide by the representable step, not the nominal one.
        double g = (gradientObjective(c, lp, item.name) -
                    gradientObjective(c, lm, item.name)) /
                   (plus - minus);
        int changes =
            static_cast<int>(lp.topkDiffersFromFixed ||
                             lp.moeDiffersFromFixed) +
            static_cast<int>(lm.topkDiffersFromFixed || lm.moeDiffersFromFixed);
        std::lock_guard<std::mutex> lock(mu);
        fd.grad[item.name][item.index] = g;
        if (changes && fd.selectionChanges == 0)
          fd.firstSelectionChange =
              item.name + "[" + std::to_string(item.index) + "]";
        fd.selectionChanges += changes;
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error)
        error = std::current_exception();
      next = items.size();
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i)
    pool.emplace_back(work);
  work();
  for (std::thread &t : pool)
    t.join();
  if (error)
    std::rethrow_exception(error);
  return fd;
}

} // namespace modref
