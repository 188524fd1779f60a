// The game set's selection: which edge a playout follows from each node (PUCT with
// first-play urgency, forced playouts at the root), and the descent to a leaf.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "features.h"
#include "search.h"
#include "search_internal.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace kgn {

using namespace search_detail;

int GameSet::select(const Game& g, int32_t node, bool at_root, bool odd) const {
  const Tree& t = g.tree;
  const Node& nd = t.nodes[node];
  const int first_edge = nd.edge0, num_edges = nd.nedges;
  KGN_DCHECK(nd.state == NODE_EXPANDED && num_edges > 0);
  const int16_t* mv = &t.move[first_edge];
  const float* n = &t.n[first_edge];
  const float* w = &t.w[first_edge];
  const uint8_t* legal = &t.legal[first_edge];
  const float* prior = (at_root && g.root_noisy) ? g.root_prior.data() : &t.prior[first_edge];
  // float(w.sum()) and prior[visited].sum() over the edges ever visited (the others hold
  // zeros, which change no partial sum of numpy's pairwise order).
  float visited_vals[MAXNN + 1], visited_priors[MAXNN + 1];
  int16_t visited_moves[MAXNN + 1];
  int n_listed = 0, n_visited = 0;
  for (int cur = nd.vhead; cur >= 0; cur = t.vnext[first_edge + cur]) {
    visited_vals[n_listed] = w[cur];
    visited_moves[n_listed++] = mv[cur];
    visited_priors[n_visited] = prior[cur];
    n_visited += n[cur] > 0;
  }
  const float wsum = pairwise_sum_sparse(visited_vals, visited_moves, n_listed, 0, nn_ + 1);
  // The node's own evaluation counts as one visit beside its children's (Node.q, as in the
  // reference): hence the 1.0 + n_total.
  double parent_q = (static_cast<double>(nd.value) + wsum) / (1.0 + nd.n_total);
  const double factor = cfg_.search.score_utility_factor;
  const bool util = factor > 0;
  double centre = 0.0, scale = 1.0;
  if (util) {  // Node.select's utility: the node's own mean score for the first-play urgency
    centre = odd ? -g.centre : g.centre;
    scale = utility_scale();
    const float* s = &t.s[first_edge];
    n_listed = 0;
    for (int cur = nd.vhead; cur >= 0; cur = t.vnext[first_edge + cur]) visited_vals[n_listed++] = s[cur];
    const float ssum = pairwise_sum_sparse(visited_vals, visited_moves, n_listed, 0, nn_ + 1);
    const double mean = (static_cast<double>(nd.score) + ssum) / (1.0 + nd.n_total);
    parent_q += score_utility(factor, mean, centre, scale);
  }
  const float mass = pairwise_sum(visited_priors, n_visited);
  const double fpu_red = at_root ? cfg_.search.root_fpu_reduction : cfg_.search.fpu_reduction;
  const float fpu = static_cast<float>(parent_q - fpu_red * std::sqrt(static_cast<double>(mass)));
  // PUCT's exploration numerator, c_puct * sqrt(N + 1): the + 1 lets the prior order the
  // children of a node before its first visit (AlphaZero's sqrt(N) would be 0 there).
  const float explore = static_cast<float>(cfg_.search.c_puct * std::sqrt(nd.n_total + 1.0));
  // Every edge's score, in float32 exactly as numpy computes it (SIMD lanes round the same
  // way), then numpy's argmax over the legal edges: the first maximum, or the first NaN.
  float edge_score[MAXNN + 4];  // + 4: room for the last 4-lane SIMD store
  int i = 0;
  bool nan_seen = false;
  float top = -std::numeric_limits<float>::infinity();
  if (util) {  // q + Node.child_utilities: float32, in numpy's order
    float su[MAXNN + 1];
    std::fill(su, su + num_edges, 0.0f);
    const float* s = &t.s[first_edge];
    for (int cur = nd.vhead; cur >= 0; cur = t.vnext[first_edge + cur]) {
      if (n[cur] > 0)
        su[cur] = static_cast<float>(
            score_utility(factor, static_cast<double>(s[cur] / n[cur]), centre, scale));
    }
    for (; i < num_edges; i++) {
      const float ni = n[i];
      float q = (ni > 0 ? w[i] : fpu) / std::max(ni, 1.0f);
      q = q + su[i];
      edge_score[i] = legal[i] ? q + prior[i] * (explore / (1.0f + ni))
                       : -std::numeric_limits<float>::infinity();
      if (std::isnan(edge_score[i])) nan_seen = true;
      else top = std::max(top, edge_score[i]);
    }
  }
#ifdef __SSE2__
  if (!util) {
    const __m128 vfpu = _mm_set1_ps(fpu), vk = _mm_set1_ps(explore), one = _mm_set1_ps(1.0f);
    const __m128 zero = _mm_setzero_ps(), vninf = _mm_set1_ps(top);
    __m128 vtop = _mm_set1_ps(top), vnan = zero;
    for (; i + 4 <= num_edges; i += 4) {
      const __m128 vn = _mm_loadu_ps(n + i), vw = _mm_loadu_ps(w + i);
      const __m128 vp = _mm_loadu_ps(prior + i);
      const __m128 visited = _mm_cmpgt_ps(vn, zero);
      const __m128 num = _mm_or_ps(_mm_and_ps(visited, vw), _mm_andnot_ps(visited, vfpu));
      const __m128 q = _mm_div_ps(num, _mm_max_ps(vn, one));
      __m128 v = _mm_add_ps(q, _mm_mul_ps(vp, _mm_div_ps(vk, _mm_add_ps(one, vn))));
      int32_t l4;
      std::memcpy(&l4, legal + i, 4);
      const __m128i zi = _mm_setzero_si128();
      __m128i li = _mm_unpacklo_epi8(_mm_cvtsi32_si128(l4), zi);
      li = _mm_unpacklo_epi16(li, zi);
      const __m128 lm = _mm_castsi128_ps(_mm_cmpgt_epi32(li, zi));
      v = _mm_or_ps(_mm_and_ps(lm, v), _mm_andnot_ps(lm, vninf));
      _mm_storeu_ps(edge_score + i, v);
      vnan = _mm_or_ps(vnan, _mm_cmpunord_ps(v, v));
      vtop = _mm_max_ps(vtop, v);
    }
    float lanes[4];
    _mm_storeu_ps(lanes, vtop);
    for (float x : lanes) top = std::max(top, x);
    nan_seen = _mm_movemask_ps(vnan) != 0;
  }
#endif
  for (; i < num_edges; i++) {
    const float ni = n[i];
    const float q = (ni > 0 ? w[i] : fpu) / std::max(ni, 1.0f);
    edge_score[i] = legal[i] ? q + prior[i] * (explore / (1.0f + ni))
                     : -std::numeric_limits<float>::infinity();
    if (std::isnan(edge_score[i])) nan_seen = true;
    else top = std::max(top, edge_score[i]);
  }
  if (at_root && g.forced) {
    // Node.select's forced playouts: the best score among the visited children short of
    // sqrt(num_edges * prior * n_total) visits (numpy's argmax over them: the first NaN, else the
    // first maximum), when there are any.
    int best = -1;
    float best_score = 0;
    for (int j = 0; j < num_edges; j++) {
      if (!legal[j] || !(n[j] > 0)) continue;
      const double need =
          std::sqrt(cfg_.forced_playouts_k * static_cast<double>(prior[j]) * nd.n_total);
      if (!(static_cast<double>(n[j]) < need)) continue;
      if (std::isnan(edge_score[j])) return j;
      if (best < 0 || edge_score[j] > best_score) {
        best = j;
        best_score = edge_score[j];
      }
    }
    if (best >= 0) return best;
  }
  if (nan_seen) {  // the slow path
    int best = -1;
    float best_score = 0;
    for (int j = 0; j < num_edges; j++) {
      if (!legal[j]) continue;
      if (std::isnan(edge_score[j])) return j;
      if (best < 0 || edge_score[j] > best_score) {
        best = j;
        best_score = edge_score[j];
      }
    }
    return best;
  }
  for (int j = 0; j < num_edges; j++)
    if (edge_score[j] == top && legal[j]) return j;
  return 0;
}

int32_t GameSet::descend(Game& g, Board& b) {
  Tree& t = g.tree;
  const float vl = static_cast<float>(cfg_.search.virtual_loss);
  int32_t node = t.root;
  bool odd = false;
  while (t.nodes[node].state == NODE_EXPANDED) {
    const int i = cfg_.search.gumbel && node == t.root ? g.gumbel.select()
                                                       : select(g, node, node == t.root, odd);
    odd = !odd;
    Node& nd = t.nodes[node];
    KGN_DCHECK(i >= 0 && i < nd.nedges);
    const int e = nd.edge0 + i;
    if (t.vnext[e] == -2) {  // first visit: into the node's visited list, in move order
      int16_t* link = &nd.vhead;
      while (*link >= 0 && *link < i) link = &t.vnext[nd.edge0 + *link];
      t.vnext[e] = *link;
      *link = static_cast<int16_t>(i);
    }
    t.n[e] += vl;
    t.w[e] -= vl;
    nd.n_total += cfg_.search.virtual_loss;
    path_nodes_.push_back(node);
    path_edges_.push_back(e);
    int32_t c = t.child[e];
    b.play_unchecked(t.move[e]);
    if (c < 0) {
      c = t.add_node();
      t.child[e] = c;
    }
    node = c;
    Node& cn = t.nodes[node];
    if (cn.state == NODE_NEW && is_final(b)) {
      const double black = b.score();
      const double mover = b.tp == 1 ? black : -black;
      cn.state = NODE_TERMINAL;
      cn.value = mover > 0 ? 1.0f : (mover < 0 ? -1.0f : 0.0f);
      cn.score = static_cast<float>(mover);
    }
  }
  return node;
}

}  // namespace kgn
