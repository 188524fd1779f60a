// The self-play search of kgrpc/mcts (search.py, tree.py, selfplay.py) in C++: a set of games
// and their trees, driven in batches. collect() descends every game and writes the new
// leaves' input planes into one array; apply() expands and backs up the net's answers, plays
// the moves whose search is complete and hands back the finished games. The float32
// arithmetic and numpy's pairwise sums are mirrored, so with the same symmetry draws and an
// evaluator that answers the same, the trees are the Python reference's, visit for visit.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "board.h"
#include "gumbel.h"
#include "pymt.h"

namespace kgn {

struct SearchCfg {
  int visits = 800;
  double c_puct = 1.1, fpu_reduction = 0.2, root_fpu_reduction = 0.1;
  int leaves_per_batch = 8;
  double virtual_loss = 1.0;
  bool random_symmetry = true, tree_reuse = true, sensible_root_moves = true;
  // Score utility (kgrpc.mcts.tree.score_utility): 0 = off; scale in points, 0 = board width.
  double score_utility_factor = 0.0, score_utility_scale = 0.0;
  // Gumbel root search (gumbel.h) instead of PUCT at the root; interior nodes keep PUCT.
  bool gumbel = false;
  GumbelCfg gumbel_cfg;
};

struct SelfPlayCfg {
  SearchCfg search;
  double full_search_prob = 0.25;
  int cheap_visits = 100;
  int temperature_moves = 0;
  double temperature = 1.0;
  double dirichlet_alpha_19 = 0.03, noise_fraction = 0.25;
  double resign_threshold = 0.0;
  int resign_consecutive = 3;
  double resign_playout_fraction = 0.1;
  int max_moves = 1;
  // Forced playouts and policy target pruning at noisy roots (0 = off).
  double forced_playouts_k = 0.0;
  bool prune_policy_target = true;
  // Raw-policy openings: share of games, mean moves (already scaled to the board), temperature.
  double opening_policy_prob = 0.0, opening_moves = 0.0, opening_temperature = 1.5;
  // Match games (kgrpc.mcts.selfplay.play_match_game): each colour searches its own tree, and
  // its leaves are evaluated by its own model (collect reports the side of every row).
  bool two_models = false;
};

// xoshiro256** (the game's own draws: playout caps, noise, temperature, resignation).
struct Rng {
  uint64_t s[4];
  explicit Rng(uint64_t seed = 0);
  uint64_t next();
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
  double normal();
  double log_gamma_sample(double alpha);  // log of a Gamma(alpha, 1) draw
};

// Net outputs by position: (stones, player, ko bans, last moves, komi, rules, symmetry) ->
// the normalised priors over the position's legal moves, value and score. Bounded (oldest
// entries go first); shared by the game sets of a process; thread-safe.
//
// With random symmetries on, a game set that uses a cache draws a position's symmetry from
// the position and the cache's salt, not from the game's generator: a transposition or a
// repeated opening then asks for the same (position, symmetry) and hits, where a fresh draw
// would miss 7 times in 8. Across caches (processes, models) the salt differs, so which
// symmetry a position gets stays random.
class EvalCache {
 public:
  EvalCache(size_t capacity, uint64_t salt) : capacity_(capacity ? capacity : 1), salt_(salt) {}
  bool lookup(uint64_t key, int nedges, std::vector<float>& priors, float& value, float& score);
  void insert(uint64_t key, const float* priors, int nedges, float value, float score);
  void clear();
  size_t size() const { return map_.size(); }
  size_t capacity() const { return capacity_; }
  uint64_t salt() const { return salt_; }
  uint64_t hits = 0, misses = 0;

 private:
  struct Entry {
    uint64_t key;
    float value, score;
    std::vector<float> priors;
  };
  size_t capacity_;
  uint64_t salt_;
  std::unordered_map<uint64_t, uint32_t> map_;
  std::vector<Entry> slots_;
  size_t next_ = 0;
  std::mutex mu_;
};

enum NodeState : uint8_t { NODE_NEW = 0, NODE_PENDING, NODE_EXPANDED, NODE_TERMINAL };

struct Node {
  int32_t edge0 = 0;
  int32_t nedges = 0;
  float value = 0, score = 0;  // the net's (or the final score's), mover's view
  double n_total = 0;          // sum of child visits, virtual loss included
  uint8_t state = NODE_NEW;
  uint8_t any_illegal = 0;  // some edge was restricted away (a root's sensible moves)
  int16_t vhead = -1;       // first edge ever visited, in move order (see Tree::vnext)
};

struct Tree {
  std::vector<Node> nodes;
  std::vector<int16_t> move;
  std::vector<float> prior, n, w, s;
  std::vector<int32_t> child;
  std::vector<uint8_t> legal;
  // The edges a node has ever sent visits down, as a list in move order (-1 ends it, -2: not
  // in the list): the node's sums then cost O(visited edges), not O(legal moves).
  std::vector<int16_t> vnext;
  int32_t root = -1;
  int32_t add_node() {
    nodes.emplace_back();
    return static_cast<int32_t>(nodes.size() - 1);
  }
  void set_edges(int32_t node, const int16_t* moves, int k);
  void clear() {
    nodes.clear();
    move.clear();
    prior.clear();
    n.clear();
    w.clear();
    s.clear();
    child.clear();
    legal.clear();
    vnext.clear();
    root = -1;
  }
  size_t bytes() const;
};

struct TargetOut {
  bool full;
  int32_t visits;
  int32_t played_visits;  // visits of the move played (kgrpc.records format 2)
  double root_value, root_score;
  int32_t policy0, policy_len;  // into the game's policy arrays
};

enum Phase : uint8_t { PH_BEGIN = 0, PH_ROOT_EVAL, PH_WAIT, PH_SEARCH, PH_DONE };

struct Game {
  int64_t id = 0;
  Board board;
  Tree tree, spare;
  Rng rng;
  PyMT sym_rng;
  // two_models: the other colour's tree and symmetry draws (swapped in after every move).
  Tree other;
  PyMT sym_rng_other;
  Phase phase = PH_BEGIN;
  int target_visits = 0;
  bool full = false, noise = false;
  bool forced = false;   // forced playouts at this search's root (and a pruned target)
  double centre = 0.0;   // the score utility's centre: the root's mean score, mover's view
  int opening_left = 0;  // raw-policy opening moves still to play
  bool opening = false;  // the root being evaluated is for an opening move
  bool root_noisy = false;
  std::vector<float> root_prior;  // the noisy root prior (when root_noisy)
  double reused = 0.0;            // the root's visits as this search began (tree reuse)
  GumbelRoot gumbel;              // the root's state when the search is a Gumbel search
  bool may_resign = false;
  int low_streak[2] = {0, 0};
  int would_resign_color = 0;
  // The record.
  std::vector<int16_t> moves;
  std::vector<TargetOut> targets;
  std::vector<int32_t> policy_moves;
  std::vector<double> policy_probs;
  double score = 0;
  int winner = 0;
  bool resigned = false;
  std::vector<int8_t> ownership;
};

struct Leaf {
  int32_t game;
  int32_t node;
  int32_t row;  // row of the output array, -1 when the cache answered
  int8_t sym;
  int8_t side;  // two_models: 0 = black's model, 1 = white's
  int32_t path0, plen;
  uint64_t key;
  int32_t hit0;  // cached priors (in hit_priors) when row < 0
  float hit_value, hit_score;
};

struct SetStats {
  uint64_t visits = 0, nn_evals = 0, cache_hits = 0, searches = 0, moves = 0, games = 0;
  // Of the searches that finished: the root's visits at the end (KataGo's "visits", which
  // count the reused subtree) and those it began with (SearchStats.root_visits / reused_visits).
  uint64_t root_visits = 0, reused_visits = 0;
};

class GameSet {
 public:
  GameSet(int size, RulesC rules, double komi, SelfPlayCfg cfg, EvalCache* cache);
  // A new game; its komi is `komi` when has_komi (games of one set may differ in komi),
  // else the set's. With two models, white's evaluations use their own symmetry stream.
  int64_t add_game(uint64_t seed, bool has_sym_seed, uint64_t sym_seed, bool has_white_seed = false,
                   uint64_t white_sym_seed = 0, bool has_komi = false, double komi = 0.0);
  // Fills planes [max_rows, NUM_PLANES, nn] (0/1 bytes) and globals [max_rows, NUM_GLOBALS]
  // (and, when not null, sides [max_rows]: the model of each row, 0 = black's, 1 = white's);
  // returns rows.
  int collect(uint8_t* planes, float* globals, int max_rows, int8_t* sides = nullptr);
  // policy [rows, nn + 1], value [rows], score [rows] for the rows of the last collect.
  void apply(const float* policy, const float* value, const float* score, int rows);
  std::vector<Game> take_finished();
  int active() const;
  int pending_rows() const { return pending_rows_; }
  size_t tree_bytes() const;
  SetStats stats;
  int size() const { return n_; }
  const SelfPlayCfg& cfg() const { return cfg_; }

 private:
  int n_, nn_;
  RulesC rules_;
  double komi_;
  SelfPlayCfg cfg_;
  EvalCache* cache_;
  std::vector<Game> games_;
  std::vector<Game> finished_;
  std::vector<Leaf> leaves_;
  std::vector<int32_t> path_nodes_, path_edges_;
  std::vector<float> hit_priors_;
  int pending_rows_ = 0;
  bool collected_ = false;
  size_t rotate_ = 0;
  int64_t next_id_ = 0;
  Board scratch_;

  void progress(Game& g);
  void drop_finished();
  void begin_move(Game& g);
  void start_search(Game& g);
  void finish_move(Game& g);
  bool search_done(const Game& g) const;
  QUtility gumbel_utility(const Game& g) const;
  int gumbel_target(Game& g, int* idx, double* probs, double& total);
  void play_opening_move(Game& g);
  void advance_other(Game& g, int move);
  bool root_mask(const Game& g, std::vector<uint8_t>& mask) const;
  int best_edge(const Game& g) const;
  void pruned_visits(const Game& g, double* kept) const;
  double utility_scale() const;
  void end_game(Game& g);
  bool is_final(const Board& b) const;
  // `odd`: the node's mover is the root mover's opponent (for the score utility's centre).
  int select(const Game& g, int32_t node, bool at_root, bool odd) const;
  // One descent from the root; returns the leaf node, the path in path_nodes_/edges_.
  int32_t descend(Game& g, Board& b);
  void revert(Game& g, int32_t path0, int32_t plen);
  void backup(Game& g, int32_t path0, int32_t plen, double value, double score);
  bool add_leaf(Game& g, int32_t gi, int32_t node, const Board& b, int32_t path0, int32_t plen,
                uint8_t* planes, float* globals, int& rows);
  void expand(Game& g, int32_t node, const float* priors_normalised, float value, float score);
  void expand_from_policy(Game& g, int32_t node, const float* policy_row, int sym, float value,
                          float score, std::vector<float>& out_priors);
  uint64_t position_key(const Board& b) const;
};

}  // namespace kgn
