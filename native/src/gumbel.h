// Gumbel root search (Danihelka et al., "Policy improvement by planning with Gumbel", ICLR
// 2022) for the game set: at the root, m actions are sampled without replacement by
// Gumbel-top-k, sequential halving spends the visit budget on them, and the training target is
// the prior improved by the completed Q-values, softmax(logits + sigma(completed Q)). Interior
// nodes keep PUCT (GameSet::select). kgrpc/mcts/gumbel.py is the same algorithm in Python, in the
// same float order, so with no Gumbel noise both searches build the same trees (docs/native.md).
#pragma once
#include <cstdint>
#include <vector>

namespace kgn {

struct Tree;
struct Rng;

// The root settings a Gumbel search reads (SearchCfg holds them).
struct GumbelCfg {
  // m: actions sampled at the root. The paper's 16: enough that a good move is rarely left
  // out, few enough that small budgets still give each considered action several visits.
  int considered = 16;
  // sigma(q) = (c_visit + max_b N(b)) * c_scale * q, q the completed Q mapped from the
  // value's bounds onto [0, 1]: the paper's c_visit = 50, c_scale = 1.0. c_visit keeps the
  // Q term from vanishing while visits are few; c_scale says how far the Q-values may move
  // the prior.
  double c_visit = 50.0, c_scale = 1.0;
  // Scale of the Gumbel draws: 1 samples (self-play exploration); 0 makes the search
  // deterministic (the top m by prior; the exact differential tests).
  double noise_scale = 1.0;
};

// The score utility a search adds to every value (factor 0 = off), from the root mover's view.
struct QUtility {
  double factor = 0.0, centre = 0.0, scale = 1.0;
};

// Sequential halving's schedule: the visit count that the action chosen for simulation i must
// have had in this search (an action is chosen among the survivors with that count). Every
// phase gives each of its `alive` actions floor(budget / (ceil(log2 m) * alive)) visits (at
// least one), then halves them (to no fewer than 2); the schedule ends at exactly `budget`.
std::vector<int32_t> halving_schedule(int considered, int budget);

// One search's root state; edges are indices into the root's edges (0 .. nedges-1).
class GumbelRoot {
 public:
  // At the start of a search: the root's logits (log prior over legal edges), the Gumbel draws
  // (one per legal edge, in edge order, from `rng`, none when noise_scale is 0), the m
  // considered edges and the schedule of `budget` simulations.
  void begin(const Tree& t, const GumbelCfg& cfg, int budget, Rng& rng, const QUtility& u);
  // sigma(completed Q) of every legal edge from the root's statistics now: called when a
  // round of descents begins (no visit in flight then), and before the move is chosen.
  void refresh(const Tree& t, const GumbelCfg& cfg, const QUtility& u);
  // The edge of the next simulation (counted as begun); undo() takes back one that was
  // reverted (its leaf was already waiting for an evaluation).
  int select();
  void undo(int edge);
  // After the search: the considered edge with the most visits this search, best by
  // gumbel + logit + sigma; and the improved policy softmax(logit + sigma) over legal edges.
  int final_edge() const;
  void improved_policy(std::vector<double>& probs) const;
  int sims() const { return sims_; }
  int budget() const { return static_cast<int>(schedule_.size()); }

 private:
  int k_ = 0;
  std::vector<uint8_t> legal_;
  std::vector<int16_t> considered_;  // edge order (ties go to the lower edge, as in Python)
  std::vector<double> logit_, base_, sigma_;  // base = gumbel + logit
  std::vector<int32_t> count_;                // simulations begun per edge, this search
  std::vector<int32_t> schedule_;
  int sims_ = 0;
};

}  // namespace kgn
