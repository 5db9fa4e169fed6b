// The jobs list: filters, search, sort and pages (GET /v1/jobs with its cursor), refreshed in
// place: the filters are the user's (kept in the address, never overwritten by a refresh),
// and a refresh replaces only the rows of the page shown.
import { api, getJSON } from "./api.js";
import { badge, duration, el, fill, jobLink, secondsBetween, when } from "./dom.js";

const STATES = ["", "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"];
const SORTS = [["created", "newest first"], ["-created", "oldest first"], ["name", "name"]];
const PAGE = 50;

function metricsText(m) {
  if (!m) return "";
  const parts = [];
  if (m.epoch !== undefined) parts.push("epoch " + m.epoch + (m.epochs ? "/" + m.epochs : ""));
  if (typeof m.loss === "number") parts.push("loss " + m.loss.toFixed(4));
  if (typeof m.accuracy === "number") parts.push("acc " + m.accuracy.toFixed(3));
  if (m.verdict && m.verdict.kind) parts.push(m.verdict.kind);
  return parts.join("  ");
}

export function jobsView(main, query) {
  const params = new URLSearchParams((query || "").replace(/^\?/, ""));
  const state = {status: params.get("status") || "", owner: params.get("owner") || "",
                 target: params.get("target") || "", kind: params.get("kind") || "",
                 q: params.get("q") || "", sort: params.get("sort") || "created"};
  let cursors = [null];  // the cursor of each page reached; the last is the one shown
  let next = null;
  let seq = 0;  // answers to older requests (filters since changed) are dropped

  const select = (name, options) => el("select", {name, "aria-label": name},
    options.map(([v, t]) => el("option", {value: v, text: t, selected: state[name] === v})));
  const input = (name, placeholder) => el("input", {name, placeholder, value: state[name], "aria-label": name,
                                                    autocomplete: "off", spellcheck: "false"});
  const form = el("form", {class: "filters", id: "filters"},
    input("q", "search names"), select("status", STATES.map((s) => [s, s || "any state"])),
    input("owner", "owner"), select("target", [["", "any target"], ["local", "local"], ["onprem", "onprem"], ["cloud", "cloud"]]),
    select("kind", [["", "any kind"], ["exploratory", "exploratory"], ["steady", "steady"]]),
    select("sort", SORTS));
  // At a glance: what runs, what waits, what ended lately; a click filters the list by it.
  const glance = el("p", {id: "glance", class: "glance"});
  const body = el("tbody", {id: "jobs"});
  const none = el("p", {id: "jobs-none", class: "dim", hidden: true, text: "no jobs match"});
  const prev = el("button", {id: "prev", type: "button", text: "‹ newer", disabled: true});
  const more = el("button", {id: "next", type: "button", text: "older ›", disabled: true});
  const where = el("span", {id: "page-no", class: "dim"});
  main.append(el("section", {class: "card"},
    el("h2", {text: "Jobs"}), glance, form,
    el("div", {class: "scroll"}, el("table", {class: "jobs"},
      el("thead", {}, el("tr", {}, ["id", "name", "state", "target", "kind", "owner", "created", "duration", "progress"]
        .map((h) => el("th", {text: h})))), body)),
    none, el("div", {class: "pager"}, prev, where, more)));

  function address() {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(state)) if (v && !(k === "sort" && v === "created")) p.set(k, v);
    const s = p.toString();
    history.replaceState(null, "", "#/jobs" + (s ? "?" + s : ""));  // no hashchange: no re-render
    return p;
  }

  async function refresh() {
    const p = address();
    p.set("limit", PAGE);
    const cursor = cursors[cursors.length - 1];
    if (cursor) p.set("cursor", cursor);
    const mine = ++seq;
    getJSON("/v1/job-counts?hours=24").then(atAGlance, () => {});  // beside the rows, not before them
    const resp = await api("/v1/jobs?" + p.toString());
    const jobs = await resp.json();
    if (mine !== seq) return;  // the filters changed meanwhile
    next = resp.headers.get("X-Next-Cursor");
    fill(body, ...jobs.map((j) => {
      const tr = el("tr", {"data-id": j.id},
        el("td", {class: "mono"}, jobLink(j.id)), el("td", {}, jobLink(j.id, j.name)),
        el("td", {}, badge(j.status)), el("td", {text: j.target || "-"}), el("td", {text: j.kind || "-"}),
        el("td", {text: j.owner || "-"}), el("td", {text: when(j.created_at), title: j.created_at}),
        el("td", {text: duration(secondsBetween(j.started_at || j.created_at, j.finished_at))}),
        el("td", {class: "dim", text: metricsText(j.metrics)}));
      tr.addEventListener("click", (e) => { if (e.target.tagName !== "A") location.hash = "#/jobs/" + j.id; });
      return tr;
    }));
    none.hidden = jobs.length > 0;
    if (!performance.getEntriesByName("orch-jobs-shown").length) performance.mark("orch-jobs-shown");
    prev.disabled = cursors.length < 2;
    more.disabled = !next;
    where.textContent = "page " + cursors.length;
  }

  function atAGlance(counts) {
    const c = counts.states;
    const pick = (status, text) => el("button", {type: "button", class: "link " + status, "data-status": status, text,
                                                 onclick: () => { form.elements.status.value = status; changed(); }});
    fill(glance, pick("RUNNING", c.RUNNING.all + " running"), " · ", pick("PENDING", c.PENDING.all + " waiting"), " · ",
         pick("FAILED", c.FAILED.recent + " failed"), " and ", pick("SUCCEEDED", c.SUCCEEDED.recent + " succeeded"),
         " in the last 24 h");
  }

  let typing = null;
  function changed() {
    for (const f of form.elements) state[f.name] = f.value.trim();
    cursors = [null];
    refresh().catch(() => {});
  }
  form.addEventListener("change", changed);
  form.addEventListener("input", (e) => {
    if (e.target.tagName !== "INPUT") return;
    clearTimeout(typing);
    typing = setTimeout(changed, 250);
  });
  form.addEventListener("submit", (e) => { e.preventDefault(); changed(); });
  more.addEventListener("click", () => { if (next) { cursors.push(next); refresh().catch(() => {}); main.scrollIntoView(); } });
  prev.addEventListener("click", () => { if (cursors.length > 1) { cursors.pop(); refresh().catch(() => {}); } });
  return {refresh, stop() { clearTimeout(typing); }};
}
