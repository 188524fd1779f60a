#!/usr/bin/env node
// Example Node.js client of the kgrpc coordinator (see docs/clients.md).
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
// Usage: node client.js --address HOST:PORT --game GAME.bin
//                       [--token TOKEN | env KGRPC_TOKEN] [--username NAME]
//                       [--tls [--ca CA.pem]] [--protos DIR] [--timeout-s 30]
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');
const zstd = require('zstd-napi');

function parseArgs(argv) {
  const opts = {
    address: null, game: null, token: process.env.KGRPC_TOKEN || null,
    username: 'node-example', tls: false, ca: null, protos: null, timeoutS: 30,
  };
  const names = { '--address': 'address', '--game': 'game', '--token': 'token',
    '--username': 'username', '--ca': 'ca', '--protos': 'protos', '--timeout-s': 'timeoutS' };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--tls') { opts.tls = true; continue; }
    if (a === '-h' || a === '--help') {
      process.stdout.write(fs.readFileSync(__filename, 'utf8').split('\n').slice(1, 15).join('\n') + '\n');
      process.exit(0);
    }
    if (!(a in names) || i + 1 >= argv.length) throw new Error(`bad argument ${a} (see --help)`);
    opts[names[a]] = argv[++i];
  }
  if (!opts.address) throw new Error('--address is required');
  if (!opts.game) throw new Error('--game is required');
  if (!opts.token) throw new Error('a worker token is required (--token or KGRPC_TOKEN)');
  opts.timeoutS = Number(opts.timeoutS);
  return opts;
}

function findProtos(dir) {
  const candidates = dir ? [dir] : [path.join(__dirname, 'protos'), path.join(__dirname, '..', '..', 'protos')];
  for (const c of candidates) {
    if (fs.existsSync(path.join(c, 'kgrpc', 'v1', 'coordinator.proto'))) return c;
  }
  throw new Error(`kgrpc/v1/coordinator.proto not found in ${candidates.join(', ')} (run scripts/gen-clients.sh)`);
}

// Promisified unary call with auth metadata and a deadline.
function unary(client, method, request, md, timeoutS) {
  return new Promise((resolve, reject) => {
    client[method](request, md, { deadline: Date.now() + timeoutS * 1000 }, (err, resp) => {
      if (err) reject(new Error(`${method}: ${grpc.status[err.code] || err.code}: ${err.details || err.message}`));
      else resolve(resp);
    });
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// A self-play task for this worker. Before the first model is released the coordinator
// answers "wait retry_after_s and ask again"; a gating match task (only handed to workers
// that can play both models) is beyond this example.
async function getTask(client, workerId, md, timeoutS) {
  const deadline = Date.now() + timeoutS * 1000;
  for (;;) {
    const task = await unary(client, 'GetTask', { worker_id: workerId }, md, timeoutS);
    if (task.kind === 'selfplay') return task;
    if (task.kind === 'match') {
      throw new Error(`GetTask handed out gating match task ${task.task_id}: this example plays self-play only`);
    }
    const waitMs = Math.max(1, task.retry_after_s || 5) * 1000;
    if (Date.now() + waitMs > deadline) throw new Error('GetTask: no task yet (no model released)');
    await sleep(waitMs);
  }
}

// Why `record` is not a game of `task` ('' when it is): board size, rules and komi (one of
// the task's komi range when it has one) must be the task's.
function misfit(record, task, Rules) {
  if (record.board_size !== task.board_size) {
    return `board size ${record.board_size}, the task's is ${task.board_size}`;
  }
  const norm = (rules) => JSON.stringify(
    Rules.toObject(Rules.fromObject(rules || {}), { enums: String, defaults: true }));
  if (norm(record.rules) !== norm(task.rules)) {
    return `rules ${norm(record.rules)}, the task's are ${norm(task.rules)}`;
  }
  const r = task.komi_range;
  const ok = r && r.step > 0
    ? record.komi >= r.low - 1e-3 && record.komi <= r.high + 1e-3
      && Math.abs((record.komi - r.low) / r.step - Math.round((record.komi - r.low) / r.step)) * r.step <= 1e-3
    : Math.abs(record.komi - task.komi) <= 1e-3;
  return ok ? '' : `komi ${record.komi} is not one the task allows`;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const protoDir = findProtos(opts.protos);

  // Service stubs, from the .proto files at run time (field names kept as in the .proto).
  const loaderOpts = { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
    includeDirs: [protoDir] };
  const pkgDef = protoLoader.loadSync(['kgrpc/v1/coordinator.proto', 'kgrpc/v1/records.proto'], loaderOpts);
  const kgrpc = grpc.loadPackageDefinition(pkgDef).kgrpc.v1;

  // Message types for the payload (GameRecord/GameBatch travel inside bytes, so
  // they are encoded by hand with protobufjs, the library proto-loader uses).
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => path.join(protoDir, target);
  root.loadSync('kgrpc/v1/records.proto', { keepCase: true });
  const GameRecord = root.lookupType('kgrpc.v1.GameRecord');
  const GameBatch = root.lookupType('kgrpc.v1.GameBatch');
  const Rules = root.lookupType('kgrpc.v1.Rules');

  const creds = opts.tls
    ? grpc.credentials.createSsl(opts.ca ? fs.readFileSync(opts.ca) : null)
    : grpc.credentials.createInsecure();
  const client = new kgrpc.Coordinator(opts.address, creds);
  const md = new grpc.Metadata();
  md.set('authorization', `Bearer ${opts.token}`);

  try {
    // 1. Register.
    const reg = await unary(client, 'Register', {
      username: opts.username, hostname: os.hostname(), version: 'kgrpc-node-example/0.1',
      parallel_games: 1,
    }, md, opts.timeoutS);
    const workerId = reg.worker_id;
    if (!workerId) throw new Error('Register returned an empty worker_id');

    // 2. A task: every game must name the task it was played for, and have its board
    //    size, rules, komi and model (the coordinator keeps issued tasks for a while, so
    //    games kept across restarts are still accepted: docs/clients.md).
    const task = await getTask(client, workerId, md, opts.timeoutS);

    // 3. The game: parse, check it fits the task, stamp it with the task and our worker
    //    id, wrap in a batch, compress.
    const record = GameRecord.decode(fs.readFileSync(opts.game));
    const why = misfit(record, task, Rules);
    if (why) throw new Error(`the game in ${opts.game} does not fit task ${task.task_id}: ${why}`);
    record.task_id = task.task_id;
    record.black_model = task.selfplay.model;
    record.white_model = task.selfplay.model;
    record.worker_id = workerId;
    const batchBytes = GameBatch.encode(GameBatch.fromObject({ games: [record] })).finish();
    const compressed = zstd.compress(Buffer.from(batchBytes));

    // 4. Upload (client streaming: any number of messages, one reply).
    const up = await new Promise((resolve, reject) => {
      const call = client.UploadGames(md, { deadline: Date.now() + opts.timeoutS * 1000 }, (err, resp) => {
        if (err) reject(new Error(`UploadGames: ${grpc.status[err.code] || err.code}: ${err.details || err.message}`));
        else resolve(resp);
      });
      call.write({ games_zstd: compressed, game_count: 1 });
      call.end();
    });
    const ack = up.acks.find((a) => a.game_id === record.game_id) || up.acks[0] || {};

    // 5. Statistics.
    const stats = await unary(client, 'GetStats', {}, md, opts.timeoutS);
    const me = (stats.workers || []).find((w) => w.worker_id === workerId);

    const summary = {
      client: 'node',
      worker_id: workerId,
      task_id: task.task_id,
      game_id: record.game_id,
      ack_status: ack.status || 'GAME_STATUS_UNSPECIFIED',
      ack_reason: ack.reason || '',
      ack_detail: ack.detail || '',
      accepted: up.accepted,
      batch_bytes: batchBytes.length,
      compressed_bytes: compressed.length,
      games_accepted: Number(stats.games_accepted),
      worker_games_accepted: me ? Number(me.games_accepted) : null,
    };
    process.stdout.write(JSON.stringify(summary) + '\n');
    const ok = summary.ack_status === 'GAME_STATUS_ACCEPTED' || summary.ack_status === 'GAME_STATUS_DUPLICATE';
    process.exitCode = ok ? 0 : 3;
  } finally {
    client.close();
  }
}

main().catch((err) => {
  process.stderr.write(`kgrpc node client: ${err.message}\n`);
  process.exitCode = 1;
});
