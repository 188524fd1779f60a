// Drives kgrpc-gtp through Sabaki's own GTP controller library (@sabaki/gtp), as Sabaki does:
// a ControllerStateTracker syncs board size, komi and the game's history (handicap stones
// included), analysis runs until the next command, and *genmove_analyze moves are tracked.
// Run by tests/test_gtp_sabaki.py: node gtp_sabaki_session.js PYTHON MODEL; prints one JSON
// object with what each step answered (the test judges it).
'use strict'

const {Controller, ControllerStateTracker} = require('@sabaki/gtp')

const [python, model] = process.argv.slice(2)
const COMMANDS = [
  'kata-set-rules', 'kata-get-rules', 'kgs-rules', 'fixed_handicap', 'place_free_handicap',
  'set_free_handicap', 'genmove_analyze', 'kata-genmove_analyze', 'get_komi', 'printsgf',
  'clear_cache', 'kata-analyze', 'lz-analyze', 'undo', 'final_score', 'time_settings',
]

const copy = x => JSON.parse(JSON.stringify(x))

function waitFor(done, timeoutMs) {
  return new Promise((resolve, reject) => {
    const started = Date.now()
    const tick = () => {
      if (done()) return resolve()
      if (Date.now() - started > timeoutMs) return reject(new Error('timed out'))
      setTimeout(tick, 20)
    }
    tick()
  })
}

// Start an analysis, let it report `count` lines, then end it as Sabaki does: by sending the
// next command. Returns the analysis's response and lines, and the next command's response.
async function analyse(controller, name, args, count) {
  const lines = []
  const analysis = controller.sendCommand({name, args}, ({line}) => {
    if (line.startsWith('info')) lines.push(line)
  })
  await waitFor(() => lines.length >= count, 60000)
  const next = controller.sendCommand({name: 'name'})
  return {response: await analysis, lines, next: await next}
}

async function main() {
  const controller = new Controller(python, [
    '-m', 'kgrpc.programs.gtp', '--model', model, '--size', '9', '--visits', '48', '--seed', '5',
  ])
  controller.start()
  const tracker = new ControllerStateTracker(controller)
  const send = (name, ...args) => tracker.queueCommand({name, args})
  const out = {}

  out.name = (await send('name')).content
  out.knows = {}
  for (const c of COMMANDS) out.knows[c] = await tracker.knowsCommand(c)

  out.setRules = await send('kata-set-rules', 'chinese')
  out.rules = JSON.parse((await send('kata-get-rules')).content)
  out.kgsRules = await send('kgs-rules', 'chinese')

  // A two-stone handicap game: the engine places the stones, the tracker records them as
  // set_free_handicap, then syncs two moves; a second sync replays the same game (Sabaki
  // does this whenever the user navigates), which must need no command at all.
  await tracker.sync({komi: 0.5, boardsize: [9, 9], history: []})
  out.fixed = await send('fixed_handicap', '2')
  const history = [
    ...tracker.state.history,
    {name: 'play', args: ['W', 'E5']},
    {name: 'play', args: ['B', 'E3']},
  ]
  await tracker.sync({komi: 0.5, boardsize: [9, 9], history})
  out.trackedHistory = copy(tracker.state.history)
  out.komi = (await send('get_komi')).content

  out.kata = await analyse(controller, 'kata-analyze', ['W', '20', 'ownership', 'true',
    'rootInfo', 'true'], 2)
  out.lz = await analyse(controller, 'lz-analyze', ['W', '20'], 2)

  const genLines = []
  out.genmove = await controller.sendCommand(
    {name: 'kata-genmove_analyze', args: ['W', '10']},
    ({line}) => genLines.push(line),
  )
  out.genmoveLines = genLines
  out.lzGenmove = await tracker.queueCommand({name: 'genmove_analyze', args: ['B', '10']})
  await waitFor(() => tracker.state.history.length === 5, 10000).catch(() => {})
  out.historyAfterGenmove = copy(tracker.state.history)
  out.sgf = (await send('printsgf')).content
  out.clearCache = await send('clear_cache')

  // The user steps back one move and plays elsewhere: the tracker undoes and replays.
  const back = [...tracker.state.history.slice(0, -1), {name: 'play', args: ['B', 'A1']}]
  await tracker.sync({komi: 0.5, boardsize: [9, 9], history: back})
  out.sgfAfterUndo = (await send('printsgf')).content
  out.score = await send('final_score')

  // A new game with the handicap stones set by the GUI (set_free_handicap).
  await tracker.sync({
    komi: 0.5, boardsize: [9, 9],
    history: [{name: 'set_free_handicap', args: ['C3', 'G7', 'C7']}],
  })
  out.sgfFree = (await send('printsgf')).content

  await controller.stop()
  console.log(JSON.stringify(out))
}

main().catch(err => {
  console.error(err && err.stack ? err.stack : String(err))
  process.exit(1)
})
