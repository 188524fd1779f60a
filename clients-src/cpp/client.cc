// Example C++ client of the kgrpc coordinator (see docs/clients.md).
//
// Registers as a worker, asks for a self-play task (GetTask), uploads one finished
// game played for it (a serialized kgrpc.v1.GameRecord read from a file; it must
// have the task's board size, rules and komi, and is stamped with the task id,
// the task's model and our worker id) as a zstd-compressed GameBatch over the
// client-streaming UploadGames call, reads the statistics back, and prints a
// one-line JSON summary. Exit status: 0 when the game was ACCEPTED (or
// DUPLICATE), 3 when the coordinator refused it, 1 on any other error (a game
// that does not fit the task is not sent).
//
// Usage: kgrpc-client --address HOST:PORT --game GAME.bin
//                     [--token TOKEN | env KGRPC_TOKEN] [--username NAME]
//                     [--tls [--ca CA.pem]] [--timeout-s 30]
//
// Build: make -C clients-src/cpp (after scripts/gen-clients.sh).

#include <grpcpp/grpcpp.h>
#include <unistd.h>
#include <zstd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "kgrpc/v1/coordinator.grpc.pb.h"
#include "kgrpc/v1/records.pb.h"

namespace {

struct Options {
  std::string address, game, token, username = "cpp-example", ca;
  bool tls = false;
  int timeout_s = 30;
};

[[noreturn]] void Fail(const std::string& msg) { throw std::runtime_error(msg); }

Options ParseArgs(int argc, char** argv) {
  Options o;
  if (const char* t = std::getenv("KGRPC_TOKEN")) o.token = t;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--tls") { o.tls = true; continue; }
    if (a == "-h" || a == "--help") {
      std::cout << "usage: kgrpc-client --address HOST:PORT --game GAME.bin [--token TOKEN] "
                   "[--username NAME] [--tls [--ca CA.pem]] [--timeout-s 30]\n";
      std::exit(0);
    }
    if (i + 1 >= argc) Fail("missing value for " + a);
    std::string v = argv[++i];
    if (a == "--address") o.address = v;
    else if (a == "--game") o.game = v;
    else if (a == "--token") o.token = v;
    else if (a == "--username") o.username = v;
    else if (a == "--ca") o.ca = v;
    else if (a == "--timeout-s") o.timeout_s = std::stoi(v);
    else Fail("bad argument " + a + " (see --help)");
  }
  if (o.address.empty()) Fail("--address is required");
  if (o.game.empty()) Fail("--game is required");
  if (o.token.empty()) Fail("a worker token is required (--token or KGRPC_TOKEN)");
  return o;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) Fail("cannot read " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// Every call carries the bearer token and a deadline.
void Prepare(grpc::ClientContext* ctx, const Options& o) {
  ctx->AddMetadata("authorization", "Bearer " + o.token);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(o.timeout_s));
}

const char* CodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {
      "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
      "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
      "UNAUTHENTICATED"};
  int i = static_cast<int>(code);
  return i >= 0 && i <= 16 ? kNames[i] : "UNKNOWN_CODE";
}

void Check(const grpc::Status& st, const char* method) {
  if (!st.ok())
    Fail(std::string(method) + ": " + CodeName(st.error_code()) + ": " + st.error_message());
}

// A self-play task for this worker. Before the first model is released the coordinator
// answers "wait retry_after_s and ask again"; a gating match task (only handed to workers
// that can play both models) is beyond this example.
kgrpc::v1::Task GetTask(kgrpc::v1::Coordinator::Stub* stub, const Options& o,
                        const std::string& worker_id) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.timeout_s);
  kgrpc::v1::GetTaskRequest req;
  req.set_worker_id(worker_id);
  for (;;) {
    kgrpc::v1::Task task;
    grpc::ClientContext ctx;
    Prepare(&ctx, o);
    Check(stub->GetTask(&ctx, req, &task), "GetTask");
    if (task.has_selfplay()) return task;
    if (task.has_match())
      Fail("GetTask handed out gating match task " + task.task_id() +
           ": this example plays self-play only");
    const auto wait = std::chrono::seconds(task.retry_after_s() > 0 ? task.retry_after_s() : 5);
    if (std::chrono::steady_clock::now() + wait > deadline)
      Fail("GetTask: no task yet (no model released)");
    std::this_thread::sleep_for(wait);
  }
}

// Why `record` is not a game of `task` ("" when it is): board size, rules and komi (one of
// the task's komi range when it has one) must be the task's.
std::string Misfit(const kgrpc::v1::GameRecord& record, const kgrpc::v1::Task& task) {
  if (record.board_size() != task.board_size())
    return "board size " + std::to_string(record.board_size()) + ", the task's is " +
           std::to_string(task.board_size());
  if (record.rules().SerializeAsString() != task.rules().SerializeAsString())
    return "rules " + record.rules().ShortDebugString() + ", the task's are " +
           task.rules().ShortDebugString();
  const double komi = record.komi();
  bool ok;
  if (task.has_komi_range() && task.komi_range().step() > 0) {
    const auto& r = task.komi_range();
    const double k = (komi - r.low()) / r.step();
    ok = komi >= r.low() - 1e-3 && komi <= r.high() + 1e-3 &&
         std::fabs(k - std::round(k)) * r.step() <= 1e-3;
  } else {
    ok = std::fabs(komi - task.komi()) <= 1e-3;
  }
  return ok ? "" : "komi " + std::to_string(komi) + " is not one the task allows";
}

int Run(const Options& o) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (o.tls) {
    grpc::SslCredentialsOptions ssl;
    if (!o.ca.empty()) ssl.pem_root_certs = ReadFile(o.ca);
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  auto stub = kgrpc::v1::Coordinator::NewStub(grpc::CreateChannel(o.address, creds));

  // 1. Register.
  kgrpc::v1::RegisterRequest reg_req;
  reg_req.set_username(o.username);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  reg_req.set_hostname(host);
  reg_req.set_version("kgrpc-cpp-example/0.1");
  reg_req.set_parallel_games(1);
  kgrpc::v1::RegisterResponse reg;
  {
    grpc::ClientContext ctx;
    Prepare(&ctx, o);
    Check(stub->Register(&ctx, reg_req, &reg), "Register");
  }
  if (reg.worker_id().empty()) Fail("Register returned an empty worker_id");

  // 2. A task: every game must name the task it was played for, and have its board size,
  //    rules, komi and model (the coordinator keeps issued tasks for a while, so games kept
  //    across restarts are still accepted: docs/clients.md).
  const kgrpc::v1::Task task = GetTask(stub.get(), o, reg.worker_id());

  // 3. The game: parse, check it fits the task, stamp it with the task and our worker id,
  //    wrap in a batch, compress.
  kgrpc::v1::GameBatch batch;
  kgrpc::v1::GameRecord* record = batch.add_games();
  if (!record->ParseFromString(ReadFile(o.game))) Fail("cannot parse " + o.game + " as a GameRecord");
  const std::string why = Misfit(*record, task);
  if (!why.empty()) Fail("the game in " + o.game + " does not fit task " + task.task_id() + ": " + why);
  record->set_task_id(task.task_id());
  record->set_black_model(task.selfplay().model());
  record->set_white_model(task.selfplay().model());
  record->set_worker_id(reg.worker_id());
  std::string raw;
  if (!batch.SerializeToString(&raw)) Fail("cannot serialize the GameBatch");
  std::string compressed(ZSTD_compressBound(raw.size()), '\0');
  size_t n = ZSTD_compress(compressed.data(), compressed.size(), raw.data(), raw.size(), 3);
  if (ZSTD_isError(n)) Fail(std::string("zstd: ") + ZSTD_getErrorName(n));
  compressed.resize(n);

  // 4. Upload (client streaming: any number of messages, one reply).
  kgrpc::v1::UploadGamesResponse up;
  {
    grpc::ClientContext ctx;
    Prepare(&ctx, o);
    auto writer = stub->UploadGames(&ctx, &up);
    kgrpc::v1::UploadGamesRequest msg;
    msg.set_games_zstd(compressed);
    msg.set_game_count(1);
    writer->Write(msg);  // a failed write shows up in Finish()'s status
    writer->WritesDone();
    Check(writer->Finish(), "UploadGames");
  }
  kgrpc::v1::GameAck ack;
  for (const auto& a : up.acks())
    if (a.game_id() == record->game_id()) ack = a;

  // 5. Statistics.
  kgrpc::v1::Stats stats;
  {
    grpc::ClientContext ctx;
    Prepare(&ctx, o);
    Check(stub->GetStats(&ctx, kgrpc::v1::GetStatsRequest(), &stats), "GetStats");
  }
  std::string worker_accepted = "null";
  for (const auto& w : stats.workers())
    if (w.worker_id() == reg.worker_id()) worker_accepted = std::to_string(w.games_accepted());

  std::cout << "{\"client\": \"cpp\", \"worker_id\": " << JsonString(reg.worker_id())
            << ", \"task_id\": " << JsonString(task.task_id())
            << ", \"game_id\": " << JsonString(record->game_id())
            << ", \"ack_status\": " << JsonString(kgrpc::v1::GameStatus_Name(ack.status()))
            << ", \"ack_reason\": " << JsonString(ack.reason())
            << ", \"ack_detail\": " << JsonString(ack.detail())
            << ", \"accepted\": " << up.accepted() << ", \"batch_bytes\": " << raw.size()
            << ", \"compressed_bytes\": " << compressed.size()
            << ", \"games_accepted\": " << stats.games_accepted()
            << ", \"worker_games_accepted\": " << worker_accepted << "}" << std::endl;
  bool ok = ack.status() == kgrpc::v1::GAME_STATUS_ACCEPTED ||
            ack.status() == kgrpc::v1::GAME_STATUS_DUPLICATE;
  return ok ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(ParseArgs(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "kgrpc cpp client: " << e.what() << std::endl;
    return 1;
  }
}
