// The board viewer: draws a game (as /api/game gives it) on an SVG and steps through it.
// Captures come from the server's replay (kgrpc.go), so this file knows no rules: a move
// puts its stone down and takes off the points the server says it emptied.

const SVG_NS = "http://www.w3.org/2000/svg";
const COLUMNS = "ABCDEFGHJKLMNOPQRSTUVWXYZ";

function svg(tag, attrs) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

function starPoints(n) {
  if (n < 7) return [];
  const e = n >= 13 ? 3 : 2;
  const lines = [e, n - 1 - e];
  if (n % 2 === 1 && n >= 9) lines.splice(1, 0, (n - 1) / 2);
  const out = [];
  for (const r of lines) for (const c of lines) out.push([r, c]);
  return out;
}

export class BoardViewer {
  constructor(svgEl) {
    this.svg = svgEl;
    this.game = null;
    this.position = 0;
    this.boards = [];
  }

  // Board contents after each move: boards[i] = Int8Array (1 black, -1 white) after i moves.
  load(game) {
    this.game = game;
    const n = game.size;
    const board = new Int8Array(n * n);
    for (const p of game.setup.black) board[p] = 1;
    for (const p of game.setup.white) board[p] = -1;
    this.boards = [board.slice()];
    for (const m of game.moves) {
      if (m.point !== null) board[m.point] = m.color === "B" ? 1 : -1;
      for (const p of m.captures) board[p] = 0;
      this.boards.push(board.slice());
    }
    this.drawGrid();
    this.show(0);
  }

  drawGrid() {
    const n = this.game.size;
    this.svg.replaceChildren();
    this.svg.setAttribute("viewBox", `-1.1 -0.75 ${n + 1.6} ${n + 1.6}`);
    const grid = svg("g", { class: "grid" });
    for (let i = 0; i < n; i++) {
      grid.append(svg("line", { x1: 0, y1: i, x2: n - 1, y2: i }));
      grid.append(svg("line", { x1: i, y1: 0, x2: i, y2: n - 1 }));
    }
    this.svg.append(grid);
    for (const [r, c] of starPoints(n)) {
      this.svg.append(svg("circle", { class: "star", cx: c, cy: r, r: 0.09 }));
    }
    for (let i = 0; i < n; i++) {
      const col = svg("text", { class: "coord", x: i, y: n - 0.2 });
      col.textContent = COLUMNS[i];
      const row = svg("text", { class: "coord", x: -0.8, y: i });
      row.textContent = String(n - i);
      this.svg.append(col, row);
    }
    this.stones = svg("g", { class: "stones" });
    this.svg.append(this.stones);
  }

  get length() {
    return this.game ? this.game.moves.length : 0;
  }

  // Show the position after `count` moves (clamped to the game).
  show(count) {
    const n = this.game.size;
    this.position = Math.max(0, Math.min(this.length, count));
    const board = this.boards[this.position];
    const stones = [];
    for (let p = 0; p < n * n; p++) {
      if (!board[p]) continue;
      const [r, c] = [Math.floor(p / n), p % n];
      stones.push(svg("circle", {
        class: `stone ${board[p] > 0 ? "black" : "white"}`, cx: c, cy: r, r: 0.47,
        "data-point": p,
      }));
    }
    const last = this.position ? this.game.moves[this.position - 1] : null;
    if (last && last.point !== null) {
      const [r, c] = [Math.floor(last.point / n), last.point % n];
      const on = board[last.point] > 0 ? "on-black" : "on-white";
      stones.push(svg("circle", { class: `last ${on}`, cx: c, cy: r, r: 0.25 }));
    }
    this.stones.replaceChildren(...stones);
    this.svg.dataset.move = String(this.position);
    this.svg.dataset.stones = String(board.reduce((a, v) => a + (v ? 1 : 0), 0));
  }

  moveText() {
    if (!this.position) return `start (${this.length} moves)`;
    const m = this.game.moves[this.position - 1];
    const n = this.game.size;
    let where = "pass";
    if (m.point !== null) where = COLUMNS[m.point % n] + String(n - Math.floor(m.point / n));
    const who = m.color === "B" ? "black" : "white";
    return `move ${this.position} of ${this.length}: ${who} ${where}`;
  }

  valueText() {
    if (!this.position) return "";
    const m = this.game.moves[this.position - 1];
    if (m.value === null) return "";
    const side = m.color === "B" ? "black" : "white";
    let text = `root value ${m.value >= 0 ? "+" : ""}${m.value.toFixed(3)} for ${side}`;
    if (m.visits !== null) text += `, ${m.visits} visits`;
    return text;
  }
}
