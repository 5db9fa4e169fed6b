// A job's page (#/jobs/ID): its state and history, where it was placed and what else it could
// have cost, its cost so far, its per-epoch curves, step-time split, phases, device
// telemetry, its log (followed live while it runs) and a Cancel button (the API says who may).
import { REFRESH_MS, Refused, api, getJSON } from "./api.js";
import { lineChart, splitBar } from "./charts.js";
import { badge, duration, el, fill, money, secondsBetween, section, table, when } from "./dom.js";

const TERMINAL = ["SUCCEEDED", "FAILED", "CANCELLED"];
const CURVES = [["loss", "loss"], ["accuracy", "accuracy"], ["samples_per_sec", "throughput (samples/s)"],
                ["epoch_s", "epoch time (s)"]];
const LOG_KEEP = 400000;  // characters of the log kept on the page: its tail
const fix = (v, d = 2) => (typeof v === "number" ? v.toFixed(d) : v ?? "-");
const pct = (v) => (typeof v === "number" ? Math.round(v * 100) + "%" : "-");

function placement(d, cur) {
  if (!d) return [el("p", {class: "dim", text: "no placement recorded"})];
  const c = d.choice || {};
  const est = d.estimate || {};
  const out = [el("p", {}, "Placed on ", el("b", {text: c.where || d.target || "-"}),
                  " (" + (d.kind || "?") + ", decided by " + (d.decided_by || "?") + "): estimate ",
                  el("b", {text: money(est.cost, est.currency || cur)}),
                  " full, " + money(est.marginal, est.currency || cur) + " marginal, "
                  + money(est.cash, est.currency || cur) + " cash, for " + fix(est.hours) + " h")];
  if ((d.reasons || []).length) out.push(el("ul", {class: "reasons"}, d.reasons.map((r) => el("li", {text: r}))));
  const same = (a, b) => ["target", "cloud", "region", "gpu", "count", "spot", "est_cost"].every((k) => a[k] === b[k]);
  const offers = [c, ...(d.alternatives || []).filter((o) => !same(o, c))].filter((o) => o && (o.target || o.cloud));
  out.push(el("div", {class: "scroll"}, table(["", "where", "device", "price/h", "est. hours", "full cost", "marginal", "cash", "wait", "why not"],
    offers.map((o, i) => [i === 0 ? "chosen" : "", o.where || [o.target, o.cloud, o.region].filter(Boolean).join("/"),
      (o.gpu ? (o.count || 1) + "× " + o.gpu : "cpu") + (o.spot ? " spot" : ""), fix(o.price_per_hour),
      fix(o.est_hours), fix(o.est_cost), fix(o.marginal_cost), fix(o.cash_cost),
      o.wait_minutes ? Math.round(o.wait_minutes) + " min" : "-", o.excluded || (i === 0 || !(o.est_cost > c.est_cost) ? "" : "costs " + fix(o.est_cost - c.est_cost) + " more")]),
    "offers")));
  return out;
}

function stepSplit(m) {
  if (typeof m.data_fraction !== "number") return [el("p", {class: "dim", text: "not measured for this job"})];
  const data = m.data_fraction, copy = m.copy_fraction || 0;
  const parts = [{label: "waits for data", value: data}, {label: "copies to device", value: copy},
                 {label: "computes", value: Math.max(0, 1 - data - copy)}];
  const v = m.verdict || {};
  return [splitBar("step time", parts, pct),
          el("p", {}, el("b", {text: v.kind || "no verdict yet"})),
          (v.reasons || []).length ? el("ul", {class: "reasons"}, v.reasons.map((r) => el("li", {text: r}))) : null,
          (v.advice || []).length ? el("p", {class: "dim", text: "try: " + v.advice.join("; ")}) : null];
}

function phases(m) {
  const p = m.phases || {};
  const names = Object.keys(p);
  if (!names.length) return [el("p", {class: "dim", text: "known when the job ends"})];
  return [splitBar("phases", names.map((n) => ({label: n.replace(/_/g, " "), value: p[n]})), (s) => duration(s))];
}

const MEASURES = {mean_util: ["busy, mean", "%"], p10_util: ["busy, p10", "%"], util: ["busy", "%"],
                  peak_mem_gb: ["memory, peak", " GB"], mem_gb: ["memory", " GB"], mem_total_gb: ["memory, total", " GB"],
                  energy_wh: ["energy", " Wh"], power_w: ["power", " W"], seconds: ["measured for", " s"]};
const shown = (k, v) => (typeof v === "number" ? (Number.isInteger(v) ? String(v) : fix(v, 1)) + ((MEASURES[k] || [])[1] || "") : typeof v === "object" ? JSON.stringify(v) : v);

function telemetry(m) {
  const rows = [];
  const sum = (m.telemetry || {}).summary || {};
  for (const [k, v] of Object.entries(sum)) rows.push(["the run", (MEASURES[k] || [k])[0], shown(k, v)]);
  for (const [rank, point] of Object.entries(m.device_now || {})) {
    for (const [k, v] of Object.entries(point)) rows.push(["worker " + rank + ", now", (MEASURES[k] || [k])[0], shown(k, v)]);
  }
  return rows.length ? [table(["", "measure", "value"], rows)] : [el("p", {class: "dim", text: "no device telemetry (a CPU run, or none reported yet)"})];
}

export function jobView(main, id) {
  id = decodeURIComponent(id);
  const head = el("div", {class: "jobhead"});
  const cancelMsg = el("p", {id: "cancel-msg", class: "note", hidden: true});
  const cancel = el("button", {id: "cancel", type: "button", class: "danger", text: "Cancel", hidden: true});
  const cost = el("div", {id: "cost"});
  const charts = el("div", {id: "charts", class: "charts"});
  const place = el("div", {id: "placement"});
  const split = el("div", {id: "split"}), phase = el("div", {id: "phases"}), tele = el("div", {id: "telemetry"});
  const hist = el("div", {id: "history"});
  const log = el("pre", {id: "log", class: "log", tabindex: "0"});
  const logNote = el("span", {id: "log-note", class: "dim"});
  const eventsBox = el("input", {id: "log-events", type: "checkbox"});
  main.append(el("section", {class: "card"}, el("p", {}, el("a", {href: "#/jobs", text: "‹ all jobs"})), head,
                 el("div", {class: "actions"}, cancel, cancelMsg)),
              el("div", {class: "grid2"}, section("Cost", cost), section("Step time", split)),
              section("Placement", place),
              section("Per epoch", charts),
              el("div", {class: "grid2"}, section("Phases", phase), section("Devices", tele)),
              section("History", hist),
              section("Log ", logNote, el("label", {class: "dim"}, " ", eventsBox, " orch's events"), log));

  let status = null, shownPoints = -1, follow = null, logDone = false;

  // The job's own output; orch's event lines (`::orch::{...}`) only when asked for.
  let logText = "";
  eventsBox.addEventListener("change", () => setLog(logText));
  function setLog(text) {
    logText = text;
    const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    if (!eventsBox.checked) text = text.split("\n").filter((l) => !l.includes("::orch::{")).join("\n");
    log.textContent = text.length > LOG_KEEP ? text.slice(-LOG_KEEP) : text;
    if (atEnd) log.scrollTop = log.scrollHeight;  // follow the tail unless the reader scrolled up
  }

  async function followLog() {  // as `orch logs -f`: the API streams until the job ends
    follow = new AbortController();
    logNote.textContent = "(following)";
    let text = "";
    try {
      const resp = await api(`/v1/jobs/${encodeURIComponent(id)}/logs?follow=true`, {signal: follow.signal});
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        text += decoder.decode(value, {stream: true});
        if (text.length > 2 * LOG_KEEP) text = text.slice(-LOG_KEEP);
        setLog(text);
      }
      logDone = true;
      logNote.textContent = "(the job ended)";
    } catch (e) {
      logNote.textContent = e.name === "AbortError" ? "" : "(lost the stream; retrying)";
    } finally {
      follow = null;
    }
  }

  let readAt = 0;
  async function refresh() {
    // An ended job changes no more: read again only now and then (a late ledger line).
    if (TERMINAL.includes(status) && logDone && Date.now() - readAt < 10 * REFRESH_MS) return;
    readAt = Date.now();
    const [d, p] = await Promise.all([getJSON(`/v1/jobs/${encodeURIComponent(id)}`),
                                      getJSON(`/v1/jobs/${encodeURIComponent(id)}/progress`)]);
    status = d.status;
    const m = d.metrics || {};
    const cur = p.currency;
    fill(head, 
      el("h1", {}, d.name + " ", badge(d.status)),
      el("p", {class: "mono dim", text: d.id}),
      el("p", {}, [["owner", d.owner || "-"], ["target", d.target || "-"], ["kind", d.kind || "-"],
                   ["created", when(d.created_at)], ["ran", duration(secondsBetween(d.started_at, d.finished_at))]]
        .map(([k, v]) => el("span", {class: "kv"}, el("span", {class: "dim", text: k + " "}), v))),
      d.message ? el("p", {class: "message", text: d.message}) : null,
      // A failed job's last error lines and orch's hint (service/why_failed.py): its own text.
      m.failure && m.failure.lines ? el("pre", {class: "failure", text: m.failure.lines.join("\n")}) : null,
      m.failure && m.failure.hint ? el("p", {class: "note hint", text: "hint: " + m.failure.hint}) : null,
      d.warning ? el("p", {class: "note", text: d.warning}) : null);
    cancel.hidden = TERMINAL.includes(d.status);
    const c = p.cost;
    const share = c.estimate ? Math.min(1, c.so_far / c.estimate) : null;
    fill(cost, 
      el("p", {class: "big"}, money(c.so_far, cur), el("span", {class: "dim", text: " so far (full), " + money(c.cash_so_far, cur) + " cash"})),
      el("p", {text: "estimate " + money(c.estimate, cur) + " for " + fix(c.estimate_hours) + " h; ran " + fix(c.hours) + " h"}),
      share === null ? null : el("progress", {value: share, max: 1, title: pct(share) + " of the estimate"}));
    fill(place, ...placement(d.decision, cur));
    if (p.points.length !== shownPoints) {
      shownPoints = p.points.length;
      const made = CURVES.map(([key, label]) => {
        const pts = p.points.filter((q) => typeof q.metrics[key] === "number").map((q) => ({x: q.metrics.epoch ?? q.index, y: q.metrics[key]}));
        return pts.length ? el("figure", {"data-metric": key}, el("figcaption", {text: label}), lineChart(label, pts)) : null;
      }).filter(Boolean);
      fill(charts, ...(made.length ? made : [el("p", {class: "dim", text: "no reports yet (a train job reports each epoch)"})]));
    }
    fill(split, ...stepSplit(m));
    fill(phase, ...phases(m));
    fill(tele, ...telemetry(m));
    fill(hist, table(["when", "state", "message"], d.history.map((h) => [when(h.at), badge(h.status), h.message || ""])));
    if (!TERMINAL.includes(d.status) && !follow && !logDone) followLog();
    else if (TERMINAL.includes(d.status) && !follow && !logDone) {
      logDone = true;
      setLog(await (await api(`/v1/jobs/${encodeURIComponent(id)}/logs`)).text());
    }
  }

  cancel.addEventListener("click", async () => {
    cancel.disabled = true;
    cancelMsg.hidden = false;
    cancelMsg.textContent = "cancelling…";
    try {
      const r = await (await api(`/v1/jobs/${encodeURIComponent(id)}/cancel`, {method: "POST"})).json();
      cancelMsg.textContent = r.already_ended ? "it had ended already" : "cancelled";
      await refresh();
    } catch (e) {
      cancelMsg.textContent = e instanceof Refused ? "refused: " + e.message : "the server does not answer; try again";
    } finally {
      cancel.disabled = false;
    }
  });
  return {refresh, stop() { if (follow) follow.abort(); }};
}
