// The coordinator's replay of an uploaded game (kgrpc/records/replay.py proto_to_board_replay): a
// GameRecord parsed straight from its protobuf wire bytes, every move replayed, every search
// target checked, the result recomputed, the training rows encoded on the way.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "board.h"

namespace kgn {

struct TargetMsg {
  bool full_search = false;
  int32_t visits = 0;
  std::vector<int32_t> policy_moves;
  std::vector<float> policy_probs;
  float root_value = 0, root_score = 0;
  int32_t played_visits = 0;
};

struct RecordMsg {
  int32_t board_size = 0;
  int32_t scoring = 0, ko = 0;
  bool suicide = false;
  float komi = 0;
  std::vector<int32_t> moves;
  std::vector<TargetMsg> targets;
  int32_t winner = 0;
  float score = 0;
  std::vector<int32_t> ownership;
  bool resigned = false;
  int32_t format_version = 0;
};

// kgrpc.records.build.RECORD_FORMAT_VERSION: from this format on every full-search target carries
// played_visits.
constexpr int32_t RECORD_FORMAT_PLAYED_VISITS = 2;

// Throws std::invalid_argument for bytes that are not a GameRecord.
void parse_record(const uint8_t* data, size_t len, RecordMsg& out);

struct ReplayOut {
  std::string reason;  // "" when the record is valid, else a reason code of kgrpc.records.errors
  int move_index = -1;
  Board board;
  RulesC rules;
  double score = 0;
  int winner = 0;
  bool resigned = false;
  std::vector<int8_t> ownership;
  // Rows (full-search moves) when features are collected:
  std::vector<int32_t> row_moves;
  std::vector<uint8_t> states;   // rows x packed_row_bytes
  std::vector<float> globals;    // rows x 8
  std::vector<int8_t> movers;
  std::vector<float> policy;     // rows x (nn + 1), the record's probabilities, not renormalised
  std::vector<float> root_value;
  // Per move when features are collected, for the game's SGF (kgrpc.sgf.record_to_sgf): the
  // target's root value, visits and full-search flag, read here so that Python need not walk
  // the record's targets again.
  std::vector<float> move_values;
  std::vector<int32_t> move_visits;
  std::vector<uint8_t> move_full;
};

void replay(const RecordMsg& rec, bool collect_features, bool check_targets, ReplayOut& out);

}  // namespace kgn
