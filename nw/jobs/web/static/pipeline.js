// A pipeline's view (#pipeline=<id>): its steps in order with their states, the
// whole quote, what it spent and its ETA along the critical path, read from
// GET api/pipelines/<id> every second while it runs. Reached from any of its
// jobs (the job view's "pipeline" link). Loaded before tray.js, whose helpers
// (el, api, usd, duration, stateOf) it calls once both have run.
"use strict";

let pipelineTimer = null;
let pipelineId = null;
let pipelineDrawn = "";

function pipelineLink(job) {
  const a = document.createElement("a");
  a.className = "pipeline-link";
  a.href = `#pipeline=${encodeURIComponent(job.pipeline_id)}`;
  a.textContent = `step ${job.step || "?"} of ${job.pipeline_id}`;
  return a;
}

function closePipeline() {
  clearTimeout(pipelineTimer);
  pipelineTimer = null;
  pipelineId = null;
}

function openPipeline(id) {
  closePipeline();
  pipelineId = id;
  loadPipeline(id);
}

function pipelineQuote(q) {
  if (!q || q.estimated_usd === null || q.estimated_usd === undefined) return "unknown";
  return `${q.lower_bound ? "≥ " : ""}${usd(q.estimated_usd)}`;
}

function pipelineStep(step) {
  const job = step.job;
  const row = el("li", "step");
  row.dataset.step = step.name;
  row.dataset.status = job.status;
  const name = el("a", "name", step.name);
  name.href = `#job=${job.job_id}`;
  const state = job.status === "queued" && job.waiting ? job.waiting : stateOf(job);
  const status = el("span", "status", state);
  status.dataset.status = job.status;
  const bits = [job.kind];
  if (step.after.length) bits.push(`after ${step.after.join(", ")}`);
  if (LIVE.has(job.status) && step.eta_s !== null && step.eta_s !== undefined) {
    bits.push(`ends in ~${duration(step.eta_s)}`);
  }
  if (job.error && job.status !== "succeeded") bits.push(job.error);
  row.append(name, status, el("span", "meta", bits.join(" · ")));
  return row;
}

function renderPipeline(p) {
  const root = document.getElementById("pipeline");
  const live = !["succeeded", "failed", "cancelled"].includes(p.status);
  const key = JSON.stringify(p);
  if (key === pipelineDrawn && root.dataset.pipelineId === p.pipeline_id) return live;
  pipelineDrawn = key;
  root.dataset.pipelineId = p.pipeline_id;
  root.dataset.status = p.status;
  const head = el("header", "head");
  head.append(el("h2", "title", p.label || p.pipeline_id), el("span", "status", p.status));
  head.lastChild.dataset.status = p.status;
  const facts = el("dl", "pairs");
  const add = (name, value, cls) => {
    facts.append(el("dt", "", name));
    facts.append(el("dd", cls || "", value));
  };
  add("pipeline", p.pipeline_id);
  add("steps", `${Math.round(p.pct)}% of ${p.steps.length} ended`, "pct");
  add("quote", pipelineQuote(p.quote), "quote");
  add("spent", usd(p.actual_usd || 0), "spent");
  const conf = p.eta_confidence ? ` (${p.eta_confidence})` : "";
  add("ETA", live ? (p.eta_s === null ? ESTIMATING : `~${duration(p.eta_s)} left${conf}`) : "ended", "eta");
  const steps = el("ol", "steps");
  steps.append(...p.steps.map(pipelineStep));
  root.replaceChildren(head, facts, steps);
  document.title = `${p.label || p.pipeline_id} · nw.jobs`;
  return live;
}

async function loadPipeline(id) {
  let live = false;
  try {
    const p = await api(`api/pipelines/${encodeURIComponent(id)}`);
    if (pipelineId !== id) return;
    live = renderPipeline(p);
  } catch (err) {
    if (pipelineId !== id) return;
    document.getElementById("pipeline").replaceChildren(el("p", "empty", `could not load: ${err.message}`));
  }
  if (live && pipelineId === id) pipelineTimer = setTimeout(() => loadPipeline(id), 1000);
}
