// The kgrpc dashboard: reads /api/... and builds every element with textContent (names come
// from contributors and are never parsed as HTML). No inline script: the page's CSP forbids it.
import { BoardViewer } from "./board.js";

const REFRESH_MS = 10000;
const PAGES = ["overview", "elo", "models", "contributors", "matches", "games", "game"];
const COLORS = ["#2f6fb2", "#b23b2f", "#1d7a3a", "#a36b00", "#6b3fa0", "#0f7c8c"];

const $ = (id) => document.getElementById(id);
const fmtInt = (n) => (n === null || n === undefined ? "-" : Math.round(n).toLocaleString("en-US"));
const fmtElo = (x) => (x === null || x === undefined ? "?" : (x >= 0 ? "+" : "") + x.toFixed(1));
// A model's Elo where a gating match measured it (or the anchor's 0); "not measured" for a
// release made without a match, which carries its predecessor's Elo.
const modelElo = (m) => (m.elo_measured ? fmtElo(m.elo) : "not measured");
const fmtPct = (x) => (100 * x).toFixed(1) + "%";

function fmtTime(ms) {
  if (!ms) return "-";
  const d = new Date(ms);
  return d.toLocaleString("en-GB", { dateStyle: "short", timeStyle: "medium" });
}

function fmtAgo(ms, now) {
  if (!ms) return "never";
  const s = Math.max(0, ((now || Date.now()) - ms) / 1000);
  if (s < 120) return `${Math.round(s)} s ago`;
  if (s < 7200) return `${Math.round(s / 60)} min ago`;
  if (s < 172800) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} days ago`;
}

function fmtBytes(n) {
  if (n >= 1e9) return (n / 1e9).toFixed(2) + " GB";
  if (n >= 1e6) return (n / 1e6).toFixed(1) + " MB";
  if (n >= 1e3) return (n / 1e3).toFixed(1) + " kB";
  return n + " B";
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function link(text, href, download) {
  const a = el("a", text);
  a.href = href;
  if (download) a.setAttribute("download", "");
  return a;
}

// A table row from cells: a string/number, or [content, class], or a DOM node.
function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = document.createElement("td");
    if (c instanceof Node) td.append(c);
    else if (Array.isArray(c)) {
      if (c[0] instanceof Node) td.append(c[0]);
      else td.textContent = String(c[0]);
      td.className = c[1];
    } else td.textContent = c === null || c === undefined ? "" : String(c);
    tr.append(td);
  }
  return tr;
}

function fill(tableId, rows) {
  $(tableId).tBodies[0].replaceChildren(...rows);
}

async function api(path) {
  const resp = await fetch(path, { headers: { Accept: "application/json" } });
  if (!resp.ok) {
    let why = resp.statusText;
    try { why = (await resp.json()).error || why; } catch (e) { /* not JSON */ }
    throw new Error(`${path}: ${resp.status} ${why}`);
  }
  return resp.json();
}

// A 95% interval; an end the API gives as null is infinite (a match won or lost every game).
function interval(g) {
  if (!g || !g.games) return "-";
  const low = g.elo_low === null ? "-\u221e" : fmtElo(g.elo_low);
  const high = g.elo_high === null ? "+\u221e" : fmtElo(g.elo_high);
  return `${fmtElo(g.elo_diff)} [${low}, ${high}]`;
}

// ------------------------------------------------------------------------- pages
function card(label, value, sub) {
  const c = el("div", null, "card");
  c.append(el("div", label, "label"), el("div", value, "value"));
  if (sub) c.append(el("div", sub, "sub"));
  return c;
}

async function showOverview() {
  const o = await api("/api/overview");
  $("run").textContent = `run ${o.run}`;
  const model = o.current_model;
  const kept = o.sgf_games.selfplay + o.sgf_games.gating;
  const cards = [
    card("games accepted", fmtInt(o.games.accepted), `${fmtInt(o.games.received)} received`),
    card("positions accepted", fmtInt(o.positions.accepted), "training rows"),
    card("games / s", o.games_per_s.toFixed(2), `over ${Math.round(o.rate_window_s)} s`),
    card("positions / s", o.positions_per_s.toFixed(1), `over ${Math.round(o.rate_window_s)} s`),
    card("workers online", fmtInt(o.workers_online), `${fmtInt(o.workers_registered)} registered`),
    card("current model", model ? model.name : "none yet",
      model ? `Elo ${modelElo(model)}` : "waiting for the first release"),
    card("games rejected", fmtInt(o.games.rejected), `${fmtInt(o.games.duplicate)} duplicates`),
    card("shards written", fmtInt(o.shards_written), `${fmtInt(kept)} games kept as SGF`),
  ];
  cards[0].id = "card-games";
  cards[1].id = "card-positions";
  cards[4].id = "card-workers";
  cards[5].id = "card-model";
  $("cards").replaceChildren(...cards);
  const reasons = Object.entries(o.rejections);
  fill("rejections", reasons.map(([r, n]) => row([r, [fmtInt(n), "num"]])));
  $("rejections").hidden = reasons.length === 0;
  $("no-rejections").hidden = reasons.length !== 0;
}

let eloChart = null;

async function showElo() {
  const data = await api("/api/elo");
  const series = data.series;
  const stamps = new Set(series.flatMap((s) => s.points.map((p) => p.t_ms)));
  const times = [...stamps].sort((a, b) => a - b);
  const index = new Map(times.map((t, i) => [t, i]));
  const columns = [times.map((t) => t / 1000)];
  const opts = [{}];
  const rows = [];
  series.forEach((s, k) => {
    const ys = new Array(times.length).fill(null);
    for (const p of s.points) {
      ys[index.get(p.t_ms)] = p.elo;
      rows.push(row([s.label, p.model, fmtTime(p.t_ms), [fmtElo(p.elo), "num"]]));
    }
    columns.push(ys);
    const color = COLORS[k % COLORS.length];
    const o = { label: s.label, stroke: color, width: 2, spanGaps: true,
      points: { show: true, size: 8, fill: color } };
    if (!s.line) o.paths = () => null;
    opts.push(o);
  });
  fill("elo-points", rows);
  const box = $("elo-chart");
  const points = columns.slice(1).reduce((a, ys) => a + ys.filter((y) => y !== null).length, 0);
  box.dataset.points = String(points);
  if (eloChart) eloChart.destroy();
  eloChart = null;
  box.replaceChildren();
  // What the chart leaves out, said instead of drawn (releases without gating: no Elo).
  for (const note of data.notes || []) box.append(el("p", note, "muted elo-note"));
  if (!times.length) {
    box.append(el("p", "No rated model yet.", "muted"));
    return;
  }
  if (typeof window.uPlot !== "function") throw new Error("the chart library did not load");
  const width = Math.max(320, box.clientWidth - 16);
  eloChart = new window.uPlot({
    width, height: 320,
    series: opts,
    axes: [{}, { label: "Elo" }],
    scales: { x: { time: true } },
  }, columns, box);
}

// One link per file of the release (fp32, fp16, int8), each with its size in the tooltip.
function downloads(m) {
  const files = m.files && m.files.length ? m.files : [{ precision: "fp32", download: m.download }];
  const span = el("span");
  files.forEach((f, i) => {
    if (i) span.append(" ");
    const a = link(f.precision, f.download, true);
    if (f.size_bytes) a.title = fmtBytes(f.size_bytes);
    span.append(a);
  });
  return span;
}

async function showModels() {
  const models = await api("/api/models");
  fill("models", models.map((m) => {
    const g = m.gating;
    const wld = g ? `${g.wins}-${g.losses}-${g.draws}` : "-";
    return row([
      m.name, [m.status, `status-${m.status}`], [m.elo_measured ? fmtElo(m.elo) : "-", "num"], wld, interval(g),
      g ? g.reference : "-", [fmtInt(m.training_steps), "num"], [fmtBytes(m.size_bytes), "num"],
      fmtTime(m.created_ms), downloads(m),
    ]);
  }));
}

async function showContributors() {
  const users = await api("/api/contributors");
  const now = Date.now();
  // The account credited (a token's label), with the display names the operator allows.
  const named = (u) => (u.display_names.length ? ` (${u.display_names.join(", ")})` : "");
  fill("contributors", users.map((u) => row([
    (u.username || "(no name)") + named(u),
    [fmtInt(u.games), "num"], [fmtInt(u.positions), "num"],
    [fmtPct(u.share), "num"], [fmtInt(u.workers), "num"], fmtAgo(u.last_seen_ms, now),
  ])));
}

// The tokens left out of a match's counts, and why it waits (issue 31: quorum, outliers).
function setAside(m) {
  const parts = m.set_aside.map((a) => (a.why === "outlier"
    ? `token ${a.token_id}: outlier ${a.wins}-${a.losses}-${a.draws} vs ${a.others_wins}/`
      + `${a.others_games}, p=${a.p_value.toPrecision(2)}`
    : `token ${a.token_id}: quarantined, ${a.games} games`));
  if (m.waiting) parts.unshift(`waiting: ${m.waiting}`);
  return parts.join("; ") || "-";
}

async function showMatches() {
  const [matches, held] = await Promise.all([api("/api/matches"), api("/api/quarantined")]);
  fill("matches", matches.map((m) => row([
    m.candidate, m.reference, `${m.wins}-${m.losses}-${m.draws}`,
    [`${m.games} / ${m.games_target}`, "num"], [fmtInt(m.tokens), "num"], interval(m),
    [m.decision, `status-${m.decision}`], m.decided_ms ? fmtTime(m.decided_ms) : "-", setAside(m),
  ])));
  fill("quarantined", held.map((q) => row([
    [fmtInt(q.token_id), "num"], q.label, fmtTime(q.since_ms), [fmtInt(q.match_games), "num"],
    [fmtInt(q.training_games), "num"],
  ])));
}

let gamesBefore = 0;

async function showGames(more) {
  const kind = $("games-kind").value;
  const params = new URLSearchParams({ limit: "50" });
  if (kind) params.set("kind", kind);
  if (more && gamesBefore) params.set("before", String(gamesBefore));
  const data = await api("/api/games?" + params.toString());
  const rows = data.games.map((g) => row([
    [g.seq, "num"], g.kind, g.black, g.white, [g.board_size, "num"], [g.moves, "num"], g.result,
    fmtTime(g.finished_ms), link("view", "#game=" + encodeURIComponent(g.game_id)),
    link("SGF", "/sgf?id=" + encodeURIComponent(g.game_id), true),
  ]));
  const body = $("games").tBodies[0];
  if (more) body.append(...rows);
  else body.replaceChildren(...rows);
  if (data.games.length) gamesBefore = data.games[data.games.length - 1].seq;
  $("games-more").hidden = data.games.length < 50;
}

const viewer = new BoardViewer($("board"));

function step(to) {
  if (!viewer.game) return;
  viewer.show(to);
  $("slider").value = String(viewer.position);
  $("move-label").textContent = viewer.moveText();
  $("move-value").textContent = viewer.valueText();
}

async function showGame(id) {
  const g = await api("/api/game?id=" + encodeURIComponent(id));
  $("game-title").textContent = g.game.game_id;
  const info = [
    ["black", g.black], ["white", g.white], ["result", g.result],
    ["board", `${g.size}x${g.size}, komi ${g.komi}, ${g.rules}`], ["kind", g.game.kind],
    ["finished", fmtTime(g.game.finished_ms)],
  ];
  $("game-info").replaceChildren(...info.flatMap(([k, v]) => [el("dt", k), el("dd", v)]));
  $("sgf-link").href = g.sgf;
  $("sgf-link").setAttribute("download", "");
  viewer.load(g);
  $("slider").max = String(viewer.length);
  step(0);
}

// ------------------------------------------------------------------------- routing
function route() {
  const hash = location.hash.slice(1) || "overview";
  if (hash.startsWith("game=")) return ["game", decodeURIComponent(hash.slice(5))];
  return [PAGES.includes(hash) ? hash : "overview", null];
}

const LOADERS = {
  overview: showOverview, elo: showElo, models: showModels, contributors: showContributors,
  matches: showMatches, games: () => showGames(false),
};

async function render(refreshing) {
  const [page, arg] = route();
  for (const p of PAGES) $("page-" + p).hidden = p !== page;
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.dataset.page === page);
  }
  if (page === "game" && refreshing) return; // a game does not change
  try {
    if (page === "game") await showGame(arg);
    else await LOADERS[page]();
    $("status").textContent = `updated ${new Date().toLocaleTimeString("en-GB")}`;
    document.body.dataset.loaded = page;
  } catch (err) {
    $("status").textContent = `could not load: ${err.message}`;
  }
}

$("first").addEventListener("click", () => step(0));
$("prev").addEventListener("click", () => step(viewer.position - 1));
$("next").addEventListener("click", () => step(viewer.position + 1));
$("last").addEventListener("click", () => step(viewer.length));
$("slider").addEventListener("input", (e) => step(Number(e.target.value)));
$("games-kind").addEventListener("change", () => showGames(false));
$("games-more").addEventListener("click", () => showGames(true));
document.addEventListener("keydown", (e) => {
  if (route()[0] !== "game" || e.target instanceof HTMLInputElement) return;
  const to = { ArrowLeft: viewer.position - 1, ArrowRight: viewer.position + 1, Home: 0,
    End: viewer.length }[e.key];
  if (to !== undefined) { step(to); e.preventDefault(); }
});
window.addEventListener("hashchange", () => render(false));
window.addEventListener("resize", () => { if (eloChart) eloChart.setSize({
  width: Math.max(320, $("elo-chart").clientWidth - 16), height: 320 }); });
setInterval(() => render(true), REFRESH_MS);
render(false);
