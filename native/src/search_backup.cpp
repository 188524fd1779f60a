// The game set's expansion and backup: a leaf is looked up (evaluation cache) or queued
// for the net, expanded from its policy, and its value and score backed up its path.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "features.h"
#include "search.h"
#include "search_internal.h"

namespace kgn {

using namespace search_detail;

void GameSet::revert(Game& g, int32_t path0, int32_t plen) {
  Tree& t = g.tree;
  const float vl = static_cast<float>(cfg_.search.virtual_loss);
  for (int32_t i = 0; i < plen; i++) {
    const int32_t e = path_edges_[path0 + i];
    t.n[e] -= vl;
    t.w[e] += vl;
    KGN_DCHECK(t.n[e] >= 0.0f);  // only what descend added is taken back
    t.nodes[path_nodes_[path0 + i]].n_total -= cfg_.search.virtual_loss;
  }
}

void GameSet::backup(Game& g, int32_t path0, int32_t plen, double value, double score) {
  Tree& t = g.tree;
  const double vl = cfg_.search.virtual_loss;
  // descend added vl visits and -vl value per edge: the real visit replaces them, so each
  // edge gains 1 - vl visits and v + vl value.
  const float dn = static_cast<float>(1.0 - vl);
  KGN_DCHECK(plen >= 0 && path0 + plen <= static_cast<int32_t>(path_edges_.size()));
  double v = value, s = score;
  for (int32_t i = plen - 1; i >= 0; i--) {
    v = -v;
    s = -s;
    const int32_t e = path_edges_[path0 + i];
    t.n[e] += dn;
    t.w[e] += static_cast<float>(v + vl);
    t.s[e] += static_cast<float>(s);
    t.nodes[path_nodes_[path0 + i]].n_total += 1.0 - vl;
  }
  stats.visits++;
}

uint64_t GameSet::position_key(const Board& b) const {
  // Everything the net sees folds into the key, each kind under its own tag so that kinds
  // never collide: 1000 + point for a ko ban, 5000 + (move + 1) * 8 + i for the i-th last move
  // (8 > the 5 history slots), then komi's bits and the rules.
  uint64_t h = b.position_hash();
  int16_t banned[MAXNN];
  const int nb = b.ko_banned(banned);
  for (int i = 0; i < nb; i++) h = mix(h, 1000u + static_cast<uint64_t>(banned[i]));
  const int m = static_cast<int>(b.moves.size());
  for (int i = 0; i < 5; i++) {
    const int mv = i < m ? b.moves[m - 1 - i] : -1;
    h = mix(h, 5000u + static_cast<uint64_t>(mv + 1) * 8u + static_cast<uint64_t>(i));
  }
  uint64_t komi_bits;
  std::memcpy(&komi_bits, &b.komi, 8);
  h = mix(h, komi_bits);
  h = mix(h, (b.rules.territory ? 1u : 0u) | (static_cast<uint64_t>(b.rules.ko) << 1) |
                 (b.rules.suicide ? 8u : 0u) | (static_cast<uint64_t>(b.n) << 4));
  return h;
}

bool GameSet::add_leaf(Game& g, int32_t gi, int32_t node, const Board& b, int32_t path0,
                       int32_t plen, uint8_t* planes, float* globals, int& rows) {
  Tree& t = g.tree;
  int16_t legal[MAXNN + 1];
  const int k = b.legal_moves(legal);
  t.set_edges(node, legal, k);
  t.nodes[node].state = NODE_PENDING;
  const uint64_t pos = cache_ ? position_key(b) : 0;
  int sym = 0;
  if (cfg_.search.random_symmetry)
    sym = cache_ ? static_cast<int>(mix(pos, cache_->salt()) & 7u)
                 : static_cast<int>(g.sym_rng.randbelow(8));
  // The tree searched is the player's to move at the game's root: its model evaluates.
  const int8_t side = cfg_.two_models && g.board.tp != 1 ? 1 : 0;
  Leaf leaf{gi, node, -1, static_cast<int8_t>(sym), side, path0, plen, 0, -1, 0.0f, 0.0f};
  if (cache_) {
    leaf.key = mix(pos, static_cast<uint64_t>(sym) + 1);
    const int32_t h0 = static_cast<int32_t>(hit_priors_.size());
    if (cache_->lookup(leaf.key, k, hit_priors_, leaf.hit_value, leaf.hit_score)) {
      leaf.hit0 = h0;
      stats.cache_hits++;
      leaves_.push_back(leaf);
      return true;
    }
  }
  leaf.row = rows;
  encode(b, planes + static_cast<size_t>(rows) * NUM_PLANES * nn_,
         globals + static_cast<size_t>(rows) * NUM_GLOBALS, sym);
  rows++;
  leaves_.push_back(leaf);
  return true;
}

void GameSet::expand(Game& g, int32_t node, const float* priors, float value, float score) {
  Tree& t = g.tree;
  Node& nd = t.nodes[node];
  KGN_DCHECK(nd.nedges > 0);  // pass is always legal
  std::memcpy(&t.prior[nd.edge0], priors, sizeof(float) * nd.nedges);
  nd.value = value;
  nd.score = score;
  nd.state = NODE_EXPANDED;
}

void GameSet::expand_from_policy(Game& g, int32_t node, const float* policy, int sym, float value,
                                 float score, std::vector<float>& out) {
  Tree& t = g.tree;
  const Node& nd = t.nodes[node];
  const int k = nd.nedges;
  const int16_t* mv = &t.move[nd.edge0];
  const int16_t* dst = geometry(n_).sym_dst[sym];
  out.resize(k);
  for (int i = 0; i < k; i++) out[i] = policy[sym ? dst[mv[i]] : mv[i]];
  const float total = pairwise_sum_sparse(out.data(), mv, k, 0, nn_ + 1);
  // (Almost) nothing on the legal moves: uniform priors, as the reference does below 1e-12.
  if (!std::isfinite(total) || static_cast<double>(total) <= 1e-12) {
    const float u = 1.0f / static_cast<float>(k);
    for (int i = 0; i < k; i++) out[i] = u;
  } else {
    for (int i = 0; i < k; i++) out[i] = out[i] / total;
  }
  expand(g, node, out.data(), value, score);
}

}  // namespace kgn
