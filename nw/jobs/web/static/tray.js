// The nw.jobs tray: one event stream (api/summary/events) drives the tray; the
// history, workers and job views read the JSON API (a job's view follows its own
// stream while it runs). Formatting mirrors nw/cli/render.py; keep the two in step.
// URLs are relative so the app works wherever it is mounted (the server writes a
// <base href>). A job's view is #job=<id> (or ?job=<id> on load).
"use strict";

const LIVE = new Set(["queued", "running", "cancelling"]);
const ESTIMATING = "estimating…";

function usd(v) {
  return Math.abs(v) > 0 && Math.abs(v) < 0.01 ? `$${v.toFixed(3)}` : `$${v.toFixed(2)}`;
}

// A cost never travels without its honesty flag: a lower bound reads "≥ $x",
// an unknown reads "unknown", and neither ever reads "$0".
function costOf(job) {
  const c = job.cost || {};
  const actual = c.actual_usd, lower = c.actual_is_lower_bound;
  if (actual !== null && actual !== undefined) {
    if (lower) {
      return actual <= 0
        ? { text: "unknown", honesty: "unknown" }
        : { text: `≥ ${usd(actual)}`, honesty: "lower-bound" };
    }
    return { text: job.cached ? `${usd(actual)} cached` : usd(actual), honesty: "exact" };
  }
  if (lower) return { text: "unknown", honesty: "unknown" };
  if (c.estimated_usd === null || c.estimated_usd === undefined) {
    return { text: "unknown", honesty: "unknown" };
  }
  return { text: `est. ${usd(c.estimated_usd)}`, honesty: "estimate" };
}

function duration(s) {
  if (s === null || s === undefined) return "—";
  s = Math.max(s, 0);
  if (s < 10) return `${s.toFixed(1)}s`;
  if (s < 60) return `${Math.round(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(Math.floor(s % 60)).padStart(2, "0")}s`;
  return `${(s / 3600).toFixed(1)}h`;
}

// [text, confidence or null]
function etaOf(job) {
  const conf = job.confidence;
  if (conf === "prior" || conf === null || conf === undefined || job.label_hint === ESTIMATING) {
    return [ESTIMATING, null];
  }
  if (job.eta_s === null || job.eta_s === undefined) return [ESTIMATING, null];
  if (job.status === "queued") return [`~${duration(job.eta_s)} once running`, conf];
  if (job.label_hint === "taking longer than usual") return [job.label_hint, conf];
  return [`~${duration(job.eta_s)} left`, conf];
}

// The server's liveness predicate says this live job's worker is dead: it will be
// requeued or failed in a moment (render.py state_text says the same).
const WORKER_LOST = "worker lost";
function stateOf(job) {
  const live = job.status === "running" || job.status === "cancelling";
  if (live && job.worker_responsive === false) return WORKER_LOST;
  // a queued job held by a delay or its key's limit says so ("waiting: fal:kling at 2 of 2")
  if (job.status === "queued" && job.waiting) return job.waiting;
  // parked on a provider, no worker slot held: "waiting on fal, 3rd in queue"
  if (job.status === "running" && job.parked && job.waiting) return job.waiting;
  return job.status;
}

function stageOf(job) {
  const p = job.progress || {};
  const parts = [];
  if (p.current_transform) parts.push(p.current_transform);
  if (Number.isInteger(p.stage_index) && Number.isInteger(p.stage_count) && p.stage_count > 0) {
    parts.push(`${p.stage_index} of ${p.stage_count} done`);  // stage_index = stages finished
  }
  return parts.join(" · ");
}

function outcomeOf(job) {
  if (job.error) return job.error;
  if (job.cached) {
    const saved = (job.cost || {}).cache_hit_savings_usd;
    return saved ? `cache hit, saved ${usd(saved)}` : "cache hit";
  }
  return job.artifact_ref || "";
}

function ago(iso) {
  if (!iso) return "";
  const s = (Date.now() - Date.parse(iso)) / 1000;
  if (s < 5) return "just now";
  if (s < 60) return `${Math.round(s)}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  if (s < 86400) return `${Math.round(s / 3600)}h ago`;
  return new Date(iso).toLocaleString();
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function jobLink(job, cls) {
  const a = el("a", cls, job.label || job.kind);
  a.href = `#job=${job.job_id}`;
  a.title = job.label || job.kind;
  return a;
}

function when(iso) {
  if (!iso) return "—";
  return new Date(iso).toLocaleString();
}

async function api(path, options) {
  const res = await fetch(path, { credentials: "same-origin", ...(options || {}) });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = new Error(body.error || res.statusText);
    err.status = res.status;
    err.body = body;
    throw err;
  }
  return body;
}

// A job that has cost or will cost money: cancelling it throws that away, so ask.
function isPaid(job) {
  const c = job.cost || {};
  return (c.estimated_usd || 0) > 0 || (c.actual_usd || 0) > 0 || c.actual_is_lower_bound === true;
}

function cancelQuestion(job) {
  const c = job.cost || {};
  const parts = [];
  if (c.actual_usd !== null && c.actual_usd !== undefined) {
    parts.push(`${c.actual_is_lower_bound ? "at least " : ""}${usd(c.actual_usd)} spent so far`);
  }
  if (c.estimated_usd !== null && c.estimated_usd !== undefined) {
    parts.push(`estimated ${usd(c.estimated_usd)} in all`);
  }
  return `Cancel "${job.label || job.kind}"? It is a paid render (${parts.join(", ") || "cost unknown"}); what it spent is not refunded.`;
}

// ----- active cards (kept by job id so a click never lands on a rebuilt node) -----
const cards = new Map();
const latest = new Map(); // job id -> the job as last seen (for the Cancel question)

function makeCard(job) {
  const card = el("article", "job");
  card.dataset.jobId = job.job_id;
  const head = el("div", "head");
  const link = jobLink(job, "label");
  head.append(link, el("span", "kind"), el("span", "status"));
  const button = el("button", "cancel", "Cancel");
  button.type = "button";
  button.addEventListener("click", () => cancel(latest.get(job.job_id) || job, button));
  head.append(button);
  const bar = el("div", "bar");
  bar.setAttribute("role", "progressbar");
  bar.setAttribute("aria-valuemin", "0");
  bar.setAttribute("aria-valuemax", "100");
  bar.append(el("div", "fill"));
  const meta = el("div", "meta");
  const eta = el("span", "eta");
  eta.append(el("span", "eta-text"), el("em", "conf"));
  meta.append(el("span", "pct"), eta, el("span", "stage"), el("span", "cost"));
  card.append(head, bar, meta);
  return card;
}

function fillBar(root, job) {
  const q = (sel) => root.querySelector(sel);
  const bar = q(".bar");
  const fill = q(".fill");
  const pct = job.pct;
  if (pct === null || pct === undefined) {
    bar.classList.add("indeterminate");
    bar.removeAttribute("aria-valuenow");
    fill.dataset.pct = "";
    q(".pct").textContent = "—";
  } else {
    bar.classList.remove("indeterminate");
    bar.setAttribute("aria-valuenow", String(pct));
    fill.style.width = `${pct}%`;
    fill.dataset.pct = String(pct);
    q(".pct").textContent = `${Math.round(pct)}%`;
  }
  const [etaText, conf] = etaOf(job);
  q(".eta-text").textContent = etaText;
  const badge = q(".conf");
  badge.textContent = conf || "";
  badge.hidden = !conf;
  badge.dataset.confidence = conf || "";
  q(".stage").textContent = stageOf(job);
}

const COST_TITLES = {
  "lower-bound": "a call with no known price billed: the real spend is higher",
  unknown: "no price is known for this render",
  estimate: "estimated before the run",
  exact: "what the run reported",
};

function updateCard(card, job) {
  const q = (sel) => card.querySelector(sel);
  q(".label").textContent = job.label || job.kind;
  q(".label").title = job.label || job.kind;
  q(".kind").textContent = job.kind;
  const status = q(".status");
  const state = stateOf(job);
  status.textContent = state;
  status.dataset.status = state === WORKER_LOST ? "lost" : job.status;
  card.dataset.status = status.dataset.status;
  const button = q("button.cancel");
  if (job.status === "cancelling") {
    button.disabled = true;
    button.textContent = "Cancelling…";
  }
  fillBar(card, job);
  const cost = costOf(job);
  const costNode = q(".cost");
  costNode.textContent = cost.text;
  costNode.dataset.honesty = cost.honesty;
  costNode.title = COST_TITLES[cost.honesty];
}

async function cancel(job, button) {
  if (isPaid(job) && !window.confirm(cancelQuestion(job))) return;
  button.disabled = true;
  button.textContent = "Cancelling…";
  try {
    await api(`api/jobs/${job.job_id}/cancel`, {
      method: "POST",
      headers: { "content-type": "application/json" },
    });
  } catch (err) {
    button.disabled = false;
    button.textContent = "Cancel";
    button.title = `cancel failed: ${err.message}`;
  }
}

function renderActive(active) {
  const list = document.getElementById("active");
  const seen = new Set();
  active.forEach((job, i) => {
    seen.add(job.job_id);
    latest.set(job.job_id, job);
    let card = cards.get(job.job_id);
    if (!card) {
      card = makeCard(job);
      cards.set(job.job_id, card);
    }
    updateCard(card, job);
    if (list.children[i] !== card) list.insertBefore(card, list.children[i] || null);
  });
  for (const [id, card] of cards) {
    if (!seen.has(id)) {
      card.remove();
      cards.delete(id);
      latest.delete(id);
    }
  }
  document.getElementById("active-count").textContent = String(active.length);
  document.getElementById("active-empty").hidden = active.length > 0;
}

// One row of the recent feed or the history: the whole row opens the job.
function jobRow(job) {
  const li = el("li");
  li.dataset.jobId = job.job_id;
  li.dataset.status = job.status;
  li.dataset.grade = job.grade || "";
  li.title = `grade: ${job.grade || "—"}`;
  const cost = costOf(job);
  const costNode = el("span", "cost", cost.text);
  costNode.dataset.honesty = cost.honesty;
  const took = job.elapsed_s !== null && job.elapsed_s !== undefined ? `took ${duration(job.elapsed_s)}` : "";
  li.append(
    jobLink(job, "label"),
    el("span", "status", job.status),
    el("span", "took", took),
    costNode,
    el("span", "note", [outcomeOf(job), ago(job.finished_at || job.created_at)].filter(Boolean).join(" · ")),
  );
  li.addEventListener("click", (event) => {
    if (event.target.closest("a")) return; // the link navigates by itself
    location.hash = `job=${job.job_id}`;
  });
  return li;
}

let recentDrawn = "";
let recentDrawnAt = 0;

function renderRecent(recent) {
  const list = document.getElementById("recent");
  // Redrawn when a row changes (or the "ago" times are 30 s old), not on every
  // event: a click must not land on a row that was just replaced.
  const key = JSON.stringify(recent.map((j) => [j.job_id, j.status, j.grade, j.finished_at, j.cost]));
  if (key === recentDrawn && Date.now() - recentDrawnAt < 30000) return;
  recentDrawn = key;
  recentDrawnAt = Date.now();
  list.replaceChildren(...recent.map(jobRow));
  document.getElementById("recent-empty").hidden = recent.length > 0;
}

// ----- totals -------------------------------------------------------------------
let totalsAt = 0;
let recentKey = "";

function spendLine(title, s) {
  const box = el("div", "spend");
  const amount = s ? `${s.lower_bound ? "≥ " : ""}${usd(s.usd || 0)}` : "—";
  box.append(el("span", "what", title), el("b", "usd", amount));
  const parts = [];
  for (const [name, map] of [["kind", s && s.by_kind], ["actor", s && s.by_actor]]) {
    const entries = Object.entries(map || {}).filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1]);
    if (entries.length) {
      parts.push(`by ${name}: ` + entries.slice(0, 4).map(([k, v]) => `${k} ${usd(v)}`).join(", "));
    }
  }
  box.append(el("span", "by", parts.join(" · ")));
  return box;
}

function renderTotals(t) {
  const box = document.getElementById("totals");
  const spend = t.spend || {};
  const counts = el("div", "counts");
  const byStatus = (t.counts || {}).by_status || {};
  const byGrade = (t.counts || {}).by_grade || {};
  for (const [k, v] of Object.entries(byStatus)) {
    const a = el("a", "tally", `${v} ${k}`);
    a.href = `#history?status=${encodeURIComponent(k)}`;
    a.dataset.status = k;
    counts.append(a);
  }
  for (const [k, v] of Object.entries(byGrade)) {
    const a = el("a", `tally g g-${k}`, `${v} ${k}`);
    a.href = `#history?grade=${encodeURIComponent(k)}`;
    counts.append(a);
  }
  box.replaceChildren(spendLine("spent today", spend.today), spendLine("this week", spend.week), counts);
}

let totalsLater = null;

async function refreshTotals(force) {
  const wait = totalsAt + 5000 - Date.now();
  if (!force && wait > 0) {
    // at most one read in 5 s, but a change meanwhile is shown when they are up
    if (totalsLater === null) {
      totalsLater = setTimeout(() => {
        totalsLater = null;
        if (currentView === "tray") refreshTotals(false);
      }, wait);
    }
    return;
  }
  totalsAt = Date.now();
  try {
    renderTotals(await api("api/totals"));
    refreshBudgets();
  } catch (err) {
    document.getElementById("totals").replaceChildren(el("p", "empty", `totals: ${err.message}`));
  }
}

function render(snap) {
  const names = (snap.projects || []).map((p) => p.title || p.name);
  document.getElementById("projects").textContent = names.join(" · ");
  renderActive(snap.active || []);
  renderRecent(snap.recent || []);
  // the counts by status move when an active job changes state, not only the feed
  const key = [...(snap.active || []), ...(snap.recent || [])].map((j) => j.job_id + j.status).join();
  if (key !== recentKey) {
    recentKey = key;
    if (currentView === "tray") refreshTotals(false);
  }
}

function setConn(state, text) {
  const node = document.getElementById("conn");
  node.dataset.state = state;
  node.textContent = text;
}

function connect() {
  const source = new EventSource("api/summary/events");
  // "live" once the first snapshot is drawn, not when the stream opens: until
  // then the page says nothing about what is running or finished
  source.onmessage = (event) => {
    setConn("live", "live");
    render(JSON.parse(event.data));
  };
  source.onerror = () => {
    // EventSource reconnects by itself; a closed source (e.g. 401) does not.
    if (source.readyState === EventSource.CLOSED) {
      setConn("down", "disconnected — reload to retry");
    } else {
      setConn("connecting", "reconnecting…");
    }
  };
}

// ----- history ------------------------------------------------------------------
const FILTERS = ["q", "status", "kind", "actor", "grade"];
let historyNext = null;
let historyQuery = "";

function historyParams() {
  const form = document.getElementById("filters");
  const params = new URLSearchParams();
  for (const name of FILTERS) {
    const value = form.elements[name].value.trim();
    if (value) params.set(name, value);
  }
  return params;
}

async function loadHistory(more) {
  const params = historyParams();
  params.set("limit", "50");
  if (!more) {
    historyQuery = params.toString();
    historyNext = null;
  } else if (historyNext) {
    params.set("before", historyNext);
  }
  const list = document.getElementById("history");
  const note = document.getElementById("history-note");
  const older = document.getElementById("older");
  older.disabled = true;
  try {
    const body = await api(`api/jobs?${params}`);
    if (!more && params.toString() !== historyQuery) return; // a newer query went out
    const rows = (body.jobs || []).map(jobRow);
    if (more) list.append(...rows);
    else list.replaceChildren(...rows);
    historyNext = body.next || null;
    older.hidden = !historyNext;
    document.getElementById("history-empty").hidden = list.children.length > 0;
    note.textContent = `${list.children.length} shown${historyNext ? "" : " · the whole history"}`;
    rememberChoices(body.jobs || []);
  } catch (err) {
    note.textContent = `could not load: ${err.message}`;
  } finally {
    older.disabled = false;
  }
}

const knownKinds = new Set();
const knownActors = new Set();

function rememberChoices(jobs) {
  for (const job of jobs) {
    knownKinds.add(job.kind);
    if (job.actor && job.actor.id) knownActors.add(job.actor.id);
  }
  for (const [id, set] of [["known-kinds", knownKinds], ["known-actors", knownActors]]) {
    const list = document.getElementById(id);
    list.replaceChildren(...[...set].sort().map((v) => Object.assign(el("option"), { value: v })));
  }
}

function applyHistoryHash(query) {
  const form = document.getElementById("filters");
  const params = new URLSearchParams(query || "");
  for (const name of FILTERS) form.elements[name].value = params.get(name) || "";
}

// ----- workers ------------------------------------------------------------------
let workersTimer = null;

function workerCard(w) {
  const card = el("article", "worker");
  card.dataset.state = w.state;
  card.dataset.runnerId = w.runner_id;
  const head = el("div", "head");
  head.append(
    el("span", "label", `${w.host || "?"} · pid ${w.pid ?? "?"}`),
    el("span", "status", w.state),
  );
  const slots = el("span", "slots", `${w.busy ?? 0} of ${w.slots ?? "?"} slots busy`);
  const meta = el("div", "meta");
  meta.append(
    slots,
    el("span", "kinds", (w.kinds || []).join(", ") || "no kinds"),
    el("span", "", `started ${ago(w.started_at)}`),
    el("span", "beat", `last beat ${ago(w.last_beat_at)}`),
  );
  const jobs = el("div", "jobs");
  for (const id of w.jobs || []) {
    const a = el("a", "", id.slice(0, 12));
    a.href = `#job=${id}`;
    a.title = id;
    jobs.append(a);
  }
  card.append(head, meta, jobs);
  return card;
}

async function loadWorkers() {
  const box = document.getElementById("workers");
  try {
    const body = await api("api/workers");
    const workers = body.workers || [];
    workers.sort((a, b) => (a.state === b.state ? 0 : a.state === "live" ? -1 : 1));
    box.replaceChildren(...workers.map(workerCard));
    document.getElementById("workers-empty").hidden = workers.length > 0;
  } catch (err) {
    box.replaceChildren(el("p", "empty", `could not load workers: ${err.message}`));
  }
}

// ----- one job ------------------------------------------------------------------
let detailSource = null;
let detailId = null;
let trailAt = 0;
let shownJob = null;

function closeDetail() {
  detailDrawn = "";
  if (detailSource) detailSource.close();
  detailSource = null;
  detailId = null;
  shownJob = null;
}

function pair(dl, name, value) {
  if (value === null || value === undefined || value === "") return;
  dl.append(el("dt", "", name));
  const dd = el("dd");
  if (value instanceof Node) dd.append(value);
  else dd.textContent = String(value);
  dl.append(dd);
}

function pre(value) {
  return el("pre", "json", JSON.stringify(value, null, 2));
}

function costPanel(job, quote) {
  const c = job.cost || {};
  const dl = el("dl", "pairs");
  const shown = costOf(job);
  const now = el("span", "cost", shown.text);
  now.dataset.honesty = shown.honesty;
  now.title = COST_TITLES[shown.honesty];
  pair(dl, "cost", now);
  pair(dl, "estimate", c.estimated_usd === null || c.estimated_usd === undefined ? "unknown" : usd(c.estimated_usd));
  pair(dl, "actual", c.actual_usd === null || c.actual_usd === undefined ? "not reported" : usd(c.actual_usd));
  pair(dl, "lower bound", c.actual_is_lower_bound === null || c.actual_is_lower_bound === undefined
    ? "—" : c.actual_is_lower_bound ? "yes: an unpriced call billed" : "no");
  if (c.cache_hit_savings_usd) pair(dl, "cache saved", usd(c.cache_hit_savings_usd));
  if (quote && quote.as_of_total_usd !== undefined && quote.as_of_total_usd !== null) {
    pair(dl, "as of plan", `${usd(quote.as_of_total_usd)} (${quote.status || "quoted"})`);
  }
  return dl;
}

function attemptsTable(job) {
  const attempts = job.attempts || [];
  const wrap = el("div", "scroll");
  if (!attempts.length) {
    wrap.append(el("p", "empty", job.status === "queued" ? "Not started yet." : "No attempt recorded."));
    return wrap;
  }
  const table = el("table", "attempts");
  const names = ["#", "host", "pid", "started", "ended", "why"];
  const head = el("tr");
  for (const h of names) head.append(el("th", "", h));
  table.append(head);
  for (const a of attempts) {
    const tr = el("tr");
    tr.dataset.ended = a.ended || "";
    const why = [a.ended || (a.ended_at ? "" : "running"), a.error].filter(Boolean).join(": ");
    const values = [a.attempt, a.host || "—", a.pid ?? "—", when(a.started_at), a.ended_at ? when(a.ended_at) : "—", why];
    values.forEach((v, i) => {
      const td = el("td", "", String(v));
      td.dataset.label = names[i]; // a narrow screen stacks the cells, each named
      tr.append(td);
    });
    table.append(tr);
  }
  wrap.append(table);
  return wrap;
}

function trailTable(beats) {
  const wrap = el("div", "scroll");
  if (!beats.length) {
    wrap.append(el("p", "empty", "No progress reported."));
    return wrap;
  }
  const table = el("table", "trail");
  const head = el("tr");
  for (const h of ["at", "%", "stage", "message"]) head.append(el("th", "", h));
  table.append(head);
  for (const b of beats) {
    const tr = el("tr");
    const stage = b.stage && typeof b.stage === "object"
      ? [b.stage.current_transform, Number.isInteger(b.stage.stage_index) && b.stage.stage_count
        ? `${b.stage.stage_index} of ${b.stage.stage_count}` : ""].filter(Boolean).join(" · ")
      : b.stage || "";
    const at = typeof b.ts === "number" ? new Date(b.ts * 1000).toLocaleTimeString() : when(b.ts);
    for (const v of [at, b.pct === null || b.pct === undefined ? "—" : `${Math.round(b.pct)}`, stage, b.message || ""]) {
      tr.append(el("td", "", String(v)));
    }
    table.append(tr);
  }
  wrap.append(table);
  return wrap;
}

function section(title, body) {
  const s = el("section", "part");
  s.append(el("h3", "", title), body);
  return s;
}

function workerText(job) {
  const how = job.worker_responsive === false ? "silent" : "beating";
  return `${how} · last beat ${duration(job.worker_silent_s)} ago`;
}

const detailExtras = { trail: [], quote: null };
// What moves while a job runs without anything else changing: drawn in place.
const MOVING = new Set(["elapsed_s", "queue_wait_s", "remaining_s", "eta_s", "eta_ts", "pct",
  "progress", "predicted_total_s", "confidence", "label_hint", "worker_silent_s",
  "last_event_id"]);
let detailDrawn = "";

function renderDetail(job) {
  shownJob = job;
  latest.set(job.job_id, job);
  const root = document.getElementById("detail");
  const key = JSON.stringify([Object.entries(job).filter(([k]) => !MOVING.has(k)), detailExtras.quote]);
  const live = root.querySelector(".live");
  if (key === detailDrawn && root.dataset.jobId === job.job_id) {
    // Same job, same facts: only the bar, ETA and clocks move (no node is replaced,
    // so a click on Cancel or Retry always lands).
    if (live) fillBar(live, job);
    const beat = root.querySelector("dd.beat");
    if (beat && job.worker_silent_s !== null && job.worker_silent_s !== undefined) beat.textContent = workerText(job);
    const ran = root.querySelector("dd.ran");
    if (ran && job.elapsed_s !== null && job.elapsed_s !== undefined) ran.textContent = duration(job.elapsed_s);
    return;
  }
  detailDrawn = key;
  root.dataset.jobId = job.job_id;
  root.dataset.status = job.status;
  const head = el("header", "head");
  const title = el("h2", "title", job.label || job.kind);
  const state = stateOf(job);
  const status = el("span", "status", state);
  status.dataset.status = state === WORKER_LOST ? "lost" : job.status;
  head.append(title, status);
  if (job.grade) {
    const g = el("span", `grade g g-${job.grade}`, job.grade);
    g.dataset.grade = job.grade;
    head.append(g);
  }
  const actions = el("div", "actions");
  if (LIVE.has(job.status)) {
    const b = el("button", "cancel", job.status === "cancelling" ? "Cancelling…" : "Cancel");
    b.type = "button";
    b.disabled = job.status === "cancelling";
    b.addEventListener("click", () => cancel(latest.get(job.job_id) || job, b));
    actions.append(b);
  }
  if (job.status === "failed" || job.status === "cancelled") {
    const b = el("button", "retry", "Retry");
    b.type = "button";
    b.addEventListener("click", () => retry(job, b));
    actions.append(b);
  }
  const message = el("p", "message");
  message.id = "detail-message";
  head.append(actions);

  const parts = [head, message];
  if (LIVE.has(job.status)) {
    const live = el("div", "live");
    const bar = el("div", "bar");
    bar.setAttribute("role", "progressbar");
    bar.append(el("div", "fill"));
    const meta = el("div", "meta");
    const eta = el("span", "eta");
    eta.append(el("span", "eta-text"), el("em", "conf"));
    meta.append(el("span", "pct"), eta, el("span", "stage"));
    live.append(bar, meta);
    fillBar(live, job);
    parts.push(live);
  }
  if (job.error || job.error_detail) {
    const err = el("div", "error");
    err.append(el("p", "", [job.error_kind, job.error].filter(Boolean).join(": ")));
    if (job.error_detail) err.append(typeof job.error_detail === "string" ? el("pre", "json", job.error_detail) : pre(job.error_detail));
    parts.push(section("Error", err));
  }
  const facts = el("dl", "pairs");
  const id = el("code", "id", job.job_id);
  pair(facts, "job", id);
  pair(facts, "kind", job.kind);
  if (job.pipeline_id) pair(facts, "pipeline", pipelineLink(job)); // pipeline.js
  pair(facts, "actor", job.actor ? [job.actor.handle, job.actor.id].filter(Boolean).join(" · ") : "—");
  pair(facts, "project", job.project);
  pair(facts, "created", when(job.created_at));
  pair(facts, "started", job.started_at ? when(job.started_at) : "—");
  pair(facts, "finished", job.finished_at ? when(job.finished_at) : "—");
  if (job.queue_wait_s !== null && job.queue_wait_s !== undefined) pair(facts, "waited", duration(job.queue_wait_s));
  if (job.elapsed_s !== null && job.elapsed_s !== undefined) {
    pair(facts, "ran", duration(job.elapsed_s));
    facts.lastChild.className = "ran";
  }
  pair(facts, "attempt", `${job.attempt} of ${job.max_attempts}`);
  if (job.parked) {  // parked on a provider: no worker holds it
    pair(facts, "provider", [job.waiting, job.parked.request_id].filter(Boolean).join(" · "));
    pair(facts, "parked", when(job.parked.since));
    if (job.parked.deadline_at) pair(facts, "deadline", when(job.parked.deadline_at));
  }
  if (LIVE.has(job.status) && job.worker_silent_s !== null && job.worker_silent_s !== undefined) {
    pair(facts, "worker", workerText(job));
    facts.lastChild.className = "beat";
  }
  parts.push(section("Job", facts));
  parts.push(section("Cost", costPanel(job, detailExtras.quote)));
  parts.push(section("Attempts", attemptsTable(job)));
  const trail = section("Progress trail", trailTable(detailExtras.trail));
  trail.classList.add("trail-part");
  parts.push(trail);
  parts.push(section("Params", pre(job.params || {})));
  if (job.result !== null && job.result !== undefined) parts.push(section("Result", pre(job.result)));
  if (job.artifact_ref) parts.push(section("Artifact", el("code", "id", job.artifact_ref)));
  root.replaceChildren(...parts);
  document.title = `${job.label || job.kind} · nw.jobs`;
}

async function refreshTrail(jobId, force) {
  if (!force && Date.now() - trailAt < 2000) return;
  trailAt = Date.now();
  try {
    const body = await api(`api/jobs/${jobId}/progress?limit=200`);
    if (detailId !== jobId) return;
    detailExtras.trail = body.progress || [];
    const part = document.querySelector("#detail .trail-part");
    if (part) part.replaceChildren(el("h3", "", "Progress trail"), trailTable(detailExtras.trail));
  } catch (_err) {
    // the trail is a nicety; the job itself says what matters
  }
}

async function loadQuote(job) {
  if (!job.params || !job.params.plan) return;
  const params = new URLSearchParams({ kind: job.kind, params: JSON.stringify(job.params) });
  if (job.project) params.set("project", job.project);
  try {
    const body = await api(`api/estimate?${params}`);
    if (detailId !== job.job_id) return;
    detailExtras.quote = body.quote || null;
    renderDetail(shownJob || job);
  } catch (_err) {
    // no quote: the cost panel shows the job's own figures
  }
}

function followJob(jobId) {
  if (detailSource) detailSource.close();
  detailSource = new EventSource(`api/jobs/${jobId}/events`);
  detailSource.onmessage = (event) => {
    if (detailId !== jobId) return;
    renderDetail(JSON.parse(event.data));
    refreshTrail(jobId, false);
  };
  detailSource.addEventListener("end", () => {
    detailSource.close();
    detailSource = null;
    refreshTrail(jobId, true);
  });
}

async function openJob(jobId) {
  if (detailId === jobId) return;
  closeDetail();
  detailId = jobId;
  detailExtras.trail = [];
  detailExtras.quote = null;
  const root = document.getElementById("detail");
  root.replaceChildren(el("p", "empty", "Loading…"));
  try {
    const job = await api(`api/jobs/${jobId}`);
    if (detailId !== jobId) return;
    renderDetail(job);
    refreshTrail(jobId, true);
    loadQuote(job);
    if (LIVE.has(job.status)) followJob(jobId);
  } catch (err) {
    root.replaceChildren(el("p", "empty", err.status === 404 ? `No job ${jobId} here.` : `Could not load the job: ${err.message}`));
  }
}

async function retry(job, button) {
  button.disabled = true;
  const message = document.getElementById("detail-message");
  const send = (approved) => api(`api/jobs/${job.job_id}/retry`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ approved }),
  });
  try {
    let again;
    try {
      again = await send(false);
    } catch (err) {
      // The cost gate wants an approval: ask the person. (A spent budget is a 402
      // too, but no approval lifts it: that is said, not asked.)
      if (err.status !== 402 || !(err.body || {}).needs_approval) throw err;
      if (!window.confirm(`${err.message}\n\nApprove the cost and run it again?`)) {
        message.textContent = `Not retried: ${err.message}`;
        button.disabled = false;
        return;
      }
      again = await send(true);
    }
    message.textContent = "Queued again.";
    detailId = null; // reopen: the new run has its own stream
    openJob(again.job_id || job.job_id);
  } catch (err) {
    message.textContent = `Retry failed: ${err.message}`;
    button.disabled = false;
  }
}

// ----- views --------------------------------------------------------------------
let currentView = "tray";

function route() {
  const hash = location.hash.replace(/^#/, "");
  let view = "tray";
  let arg = "";
  if (hash.startsWith("job=")) {
    view = "job";
    arg = decodeURIComponent(hash.slice(4));
  } else if (hash.startsWith("pipeline=")) {
    view = "pipeline";
    arg = decodeURIComponent(hash.slice("pipeline=".length));
  } else if (hash.startsWith("history")) {
    view = "history";
    arg = hash.slice("history".length).replace(/^\?/, "");
  } else if (hash === "workers") {
    view = "workers";
  } else if (!hash) {
    const fromQuery = new URLSearchParams(location.search).get("job");
    if (fromQuery) {
      view = "job";
      arg = fromQuery;
    }
  }
  show(view, arg);
}

function show(view, arg) {
  currentView = view;
  // "back" from a job returns to the list it was opened from (tray, history, workers).
  if (view !== "job") document.getElementById("back").href = location.hash || "#";
  for (const name of ["tray", "history", "workers", "job", "pipeline"]) {
    document.getElementById(`view-${name}`).hidden = name !== view;
  }
  for (const a of document.querySelectorAll(".tabs a")) {
    a.classList.toggle("on", a.dataset.view === view);
  }
  if (view !== "job") {
    closeDetail();
    document.title = "nw.jobs tray";
  }
  clearInterval(workersTimer);
  workersTimer = null;
  if (view === "pipeline") openPipeline(arg); // pipeline.js
  else closePipeline();
  if (view === "job") openJob(arg);
  if (view === "history") {
    applyHistoryHash(arg);
    loadHistory(false);
  }
  if (view === "workers") {
    loadWorkers();
    workersTimer = setInterval(loadWorkers, 3000);
  }
  if (view === "tray") refreshTotals(true);
}

function setup() {
  const form = document.getElementById("filters");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const params = historyParams().toString();
    const target = `#history${params ? `?${params}` : ""}`;
    if (location.hash === target) loadHistory(false);
    else location.hash = target;
  });
  for (const name of ["status", "grade"]) {
    form.elements[name].addEventListener("change", () => form.requestSubmit());
  }
  document.getElementById("older").addEventListener("click", () => loadHistory(true));
  window.addEventListener("hashchange", route);
  connect();
  route();
}

setup();

// ----- budgets (GET /api/budgets): each stored budget as spent of cap ------------
function budgetRow(project, b, many) {
  const row = el("div", "budget");
  row.dataset.key = b.key;
  const spent = `${b.is_lower_bound ? "≥ " : ""}${usd(b.spent_usd || 0)}`;
  const window = b.per ? `per ${b.per} (UTC)` : "all time";
  const name = el("span", "what", many ? `${project.title || project.name}: ${b.key}` : b.key);
  const figure = el("b", "usd", `${spent} of ${usd(b.usd)}`);
  const bar = el("span", "meter");
  const fill = el("span", "fill");
  const share = b.usd > 0 ? Math.min(1, (b.spent_usd || 0) / b.usd) : 1;
  fill.style.width = `${Math.round(share * 100)}%`;
  bar.append(fill);
  row.classList.toggle("full", (b.remaining_usd || 0) <= 0);
  row.append(name, figure, bar, el("span", "by", `${window} · ${usd(Math.max(b.remaining_usd || 0, 0))} left`));
  return row;
}

async function refreshBudgets() {
  const box = document.getElementById("budgets");
  if (!box) return;
  try {
    const data = await api("api/budgets");
    const projects = data.projects || [];
    const rows = [];
    for (const p of projects) for (const b of p.budgets || []) rows.push(budgetRow(p, b, projects.length > 1));
    box.hidden = rows.length === 0;
    box.replaceChildren(el("h2", null, "Budgets"), ...rows);
  } catch (err) {
    box.hidden = false;
    box.replaceChildren(el("p", "empty", `budgets: ${err.message}`));
  }
}
