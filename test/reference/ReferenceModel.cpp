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

/// The block body on `n` rows `x` (one sequence, ascending original positions
/// `pos`): returns a = Attn(RMSNorm(x)) and m = MLP(RMSNorm(x + a)).
void blockBody(const ModelConfig &c, const Weights &w, int64_t layer,
               const std::vector<double> &x, const std::vector<int64_t> &pos,
               std::vector<double> &a, std::vector<double> &m) {
  const int64_t n = static_cast<int64_t>(pos.size());
  const int64_t d = c.dModel, h = c.nHeads, hd = c.headDim(), ff = c.dFF;
  // Grouped-query attention: kvh key/value heads of hd, query head `head`
  // reads key/value head head / (h / kvh) (docs/model-format.md section 3).
  const int64_t kvh = c.nKvHeads, kvd = kvh * hd, group = h / kvh;
  const std::string p = "blocks." + std::to_string(layer) + ".";
  auto W = [&](const std::string &name, size_t size) -> const auto & {
    return weight(w, p + name, size);
  };

  // Attention.
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
  a = product(c.bf16, o, n, d, W("attn.wo.weight", d * d), d);

  // MLP on h = x + a.
  std::vector<double> hres(n * d);
  for (int64_t i = 0; i < n * d; ++i)
    hres[i] = x[i] + a[i];
  std::vector<double> n2 =
      rmsNorm(hres, n, d, W("mlp_norm.weight", d), c.normEps);
  std::vector<double> up =
      product(c.bf16, n2, n, d, W("mlp.w_up.weight", ff * d), ff);
  std::vector<double> act(n * ff);
  if (c.mlp == Mlp::SwiGLU) {
    std::vector<double> gate =
        product(c.bf16, n2, n, d, W("mlp.w_gate.weight", ff * d), ff);
    for (int64_t i = 0; i < n * ff; ++i)
      act[i] = silu(gate[i]) * up[i];
  } else {
    for (int64_t i = 0; i < n * ff; ++i)
      act[i] = gelu(up[i]);
  }
  m = product(c.bf16, act, n, ff, W("mlp.w_down.weight", d * ff), d);
}

} // namespace

//===----------------------------------------------------------------------===//
// ModelConfig
//===----------------------------------------------------------------------===//

int64_t ModelConfig::numRoutedLayers() const {
  return std::count(routed.begin(), routed.end(), true);
}

ModelConfig ModelConfig::fromJson(const json &j) {
  if (!j.is_object())
    fail("", "the model description must be a JSON object");
  rejectUnknownKeys(j,
                    {"name", "vocab_size", "d_model", "n_layers", "n_heads",
                     "n_kv_heads", "d_ff", "seq_len", "mlp", "norm_eps",
                     "rope_theta", "tie_embeddings", "dtype", "mod"},
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
  if (mod.contains("schedule") && mod.at("schedule").is_array()) {
    for (const json &e : mod.at("schedule")) {
      if (!e.is_number_integer())
        fail("mod.schedule", "layer indices must be integers");
      int64_t l = e.get<int64_t>();
      if (l < 0 || l >= c.nLayers)
        fail("mod.schedule",
             "layer index " + std::to_string(l) + " out of range");
      c.routed[l] = true;
    }
  } else {
    std::string s = getString(mod, "schedule", "mod.", "every_other");
    for (int64_t l = 0; l < c.nLayers; ++l) {
      if (s == "every_other")
        c.routed[l] = (l % 2) == 1;
      else if (s == "all")
        c.routed[l] = true;
      else if (s == "none")
        c.routed[l] = false;
      else
        fail("mod.schedule",
             "expected 'every_other', 'all', 'none' or a list of layers");
    }
  }

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
    if (c.mlp == Mlp::SwiGLU)
      out.push_back({p + "mlp.w_gate.weight", {ff, d}});
    out.push_back({p + "mlp.w_up.weight", {ff, d}});
    out.push_back({p + "mlp.w_down.weight", {d, ff}});
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
ReferenceOutput forwardImpl(const ModelConfig &c, const Weights &w,
                            const std::vector<int32_t> &tokens, int64_t batch,
                            RouteMode mode, const Selection *fixed,
                            bool *naturalDiffers) {
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
    if (!c.routed[l]) {
      // Dense: y = (x + a) + m.
      for (int64_t b = 0; b < batch; ++b) {
        std::vector<double> xs(x.begin() + b * S * d,
                               x.begin() + (b + 1) * S * d);
        std::vector<int64_t> pos(S);
        std::iota(pos.begin(), pos.end(), 0);
        std::vector<double> a, m;
        blockBody(c, w, l, xs, pos, a, m);
        for (int64_t i = 0; i < S * d; ++i)
          x[b * S * d + i] = (xs[i] + a[i]) + m[i];
      }
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
      blockBody(c, w, l, xs, sel, a, m);

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
                            const Selection *fixed) {
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
                                    &loss.topkDiffersFromFixed);

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
  loss.total = loss.ce + c.auxLossWeight * loss.aux;
  loss.selection = std::move(out.routed);
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
  double obj = loss.ce;
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
        LossBreakdown lp = referenceLoss(c, w, tokens, batch, &held);
        slot = minus;
        LossBreakdown lm = referenceLoss(c, w, tokens, batch, &held);
        slot = theta;
        // Divide by the representable step, not the nominal one.
        double g = (gradientObjective(c, lp, item.name) -
                    gradientObjective(c, lm, item.name)) /
                   (plus - minus);
        int changes = static_cast<int>(lp.topkDiffersFromFixed) +
                      static_cast<int>(lm.topkDiffersFromFixed);
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
