// The nw.jobs tray: one event stream (api/summary/events) drives the whole page.
// Formatting mirrors nw/cli_render.py; keep the two in step. URLs are relative so
// the app works wherever it is mounted (the server writes a <base href>).
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
// requeued or failed in a moment (cli_render.state_text says the same).
const WORKER_LOST = "worker lost";
function stateOf(job) {
  const live = job.status === "running" || job.status === "cancelling";
  return live && job.worker_responsive === false ? WORKER_LOST : job.status;
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

// ----- active cards (kept by job id so a click never lands on a rebuilt node) -----
const cards = new Map();

function makeCard(job) {
  const card = el("article", "job");
  card.dataset.jobId = job.job_id;
  const head = el("div", "head");
  head.append(el("span", "label"), el("span", "kind"), el("span", "status"));
  const button = el("button", "cancel", "Cancel");
  button.type = "button";
  button.addEventListener("click", () => cancel(job.job_id, button));
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
  const cost = costOf(job);
  const costNode = q(".cost");
  costNode.textContent = cost.text;
  costNode.dataset.honesty = cost.honesty;
  costNode.title = {
    "lower-bound": "a call with no known price billed: the real spend is higher",
    unknown: "no price is known for this render",
    estimate: "estimated before the run",
    exact: "what the run reported",
  }[cost.honesty];
}

async function cancel(jobId, button) {
  button.disabled = true;
  button.textContent = "Cancelling…";
  try {
    const res = await fetch(`api/jobs/${jobId}/cancel`, { method: "POST", credentials: "same-origin" });
    if (!res.ok) {
      const body = await res.json().catch(() => ({}));
      throw new Error(body.error || res.statusText);
    }
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
    }
  }
  document.getElementById("active-count").textContent = String(active.length);
  document.getElementById("active-empty").hidden = active.length > 0;
}

function renderRecent(recent) {
  const list = document.getElementById("recent");
  const rows = recent.map((job) => {
    const li = el("li");
    li.dataset.jobId = job.job_id;
    li.dataset.status = job.status;
    li.dataset.grade = job.grade || "";
    li.title = `grade: ${job.grade || "—"}`;
    const status = el("span", "status", job.status);
    const cost = costOf(job);
    const costNode = el("span", "cost", cost.text);
    costNode.dataset.honesty = cost.honesty;
    li.append(
      el("span", "label", job.label || job.kind),
      status,
      el("span", "took", job.elapsed_s !== null && job.elapsed_s !== undefined ? `took ${duration(job.elapsed_s)}` : ""),
      costNode,
      el("span", "note", [outcomeOf(job), ago(job.finished_at)].filter(Boolean).join(" · ")),
    );
    return li;
  });
  list.replaceChildren(...rows);
  document.getElementById("recent-empty").hidden = recent.length > 0;
}

function render(snap) {
  const names = (snap.projects || []).map((p) => p.title || p.name);
  document.getElementById("projects").textContent = names.join(" · ");
  renderActive(snap.active || []);
  renderRecent(snap.recent || []);
}

function setConn(state, text) {
  const node = document.getElementById("conn");
  node.dataset.state = state;
  node.textContent = text;
}

function connect() {
  const source = new EventSource("api/summary/events");
  source.onopen = () => setConn("live", "live");
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

connect();
