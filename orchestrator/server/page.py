"""The status page: one HTML file with its script inline, no external assets, no build step.

It reads /v1/summary every few seconds with the token given once in the URL fragment
(`/#token=...`; a fragment never reaches the server), kept in sessionStorage, sent only
in the Authorization header.
"""

from __future__ import annotations

import base64
import functools
import hashlib

REFRESH_S = 3

_SCRIPT = r"""
const REFRESH_MS = %(refresh_ms)d;
const $ = (id) => document.getElementById(id);
function takeToken() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    sessionStorage.setItem("orchToken", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname);  // the token leaves the address bar
  }
  return sessionStorage.getItem("orchToken");
}
function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "-" : String(text);
  if (cls) td.className = cls;
  row.appendChild(td);
}
function fill(id, rows, cols) {
  const body = $(id);
  body.replaceChildren();
  for (const r of rows) {
    const tr = document.createElement("tr");
    tr.dataset.id = r.id || "";
    for (const [key, fmt, cls] of cols) cell(tr, fmt ? fmt(r[key], r) : r[key], cls && cls(r));
    body.appendChild(tr);
  }
  $(id + "-none").hidden = rows.length > 0;
}
function money(v, cur) { return v === null || v === undefined ? "-" : v.toFixed(2) + " " + cur; }
async function refresh() {
  const token = takeToken();
  if (!token) { $("login").hidden = false; $("main").hidden = true; return; }
  let resp;
  try {
    resp = await fetch("/v1/summary", {headers: {"Authorization": "Bearer " + token},
                                       cache: "no-store"});
  } catch (e) { $("error").textContent = "the server does not answer: " + e; return; }
  if (resp.status === 401) {
    sessionStorage.removeItem("orchToken");
    $("error").textContent = "the token was refused; open /#token=... with a valid one";
    $("login").hidden = false; $("main").hidden = true; return;
  }
  if (!resp.ok) { $("error").textContent = "HTTP " + resp.status; return; }
  const s = await resp.json();
  $("error").textContent = "";
  $("login").hidden = true; $("main").hidden = false;
  const cur = s.currency;
  $("updated").textContent = s.now;
  const m = s.month;
  $("spend").textContent = money(m.spent, cur) + (m.budget ?
      " of " + money(m.budget, cur) + " (" + Math.round(100 * m.spent / m.budget) + "%%)" : " (no monthly_budget set)");
  $("spend").className = m.budget && m.spent >= m.budget ? "over" : "";
  fill("jobs", s.jobs, [["id"], ["name"], ["status", null, (r) => "st " + r.status], ["target"],
       ["kind"], ["owner"], ["cost", (v) => money(v, cur)],
       ["verdict", (v, r) => v ? v + (r.advice.length ? ": " + r.advice.join("; ") : "") : null],
       ["created_at"]]);
  fill("queue", s.queue, [["position"], ["id"], ["name"], ["target"],
       ["in_line"], ["owner"], ["priority"], ["waiting_for"],
       ["created_at"]]);
  fill("schedules", s.schedules, [["id"], ["name"], ["cron"], ["owner"], ["next_at"], ["last_slot"]]);
}
$("login").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem("orchToken", $("token").value.trim());
  $("token").value = "";
  refresh();
});
window.addEventListener("hashchange", refresh);  // a /#token=... link opened on the open page
refresh();
setInterval(refresh, REFRESH_MS);
""" % {"refresh_ms": REFRESH_S * 1000}

_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>orch</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.05em; margin-top: 1.6em; }
table { border-collapse: collapse; } td, th { padding: .25em .8em; border-bottom: 1px solid #ddd;
text-align: left; white-space: nowrap; } th { background: #f4f4f4; }
.st { font-weight: 600; } .SUCCEEDED { color: #17803d; } .FAILED { color: #c0262d; }
.RUNNING { color: #0b6fa4; } .PENDING { color: #a66300; } .CANCELLED { color: #8a3ea8; }
.over { color: #c0262d; font-weight: 600; } #error { color: #c0262d; } .dim { color: #777; }
</style></head>
<body>
<h1>orch</h1>
<p id="error" role="alert"></p>
<form id="login" hidden><label>API token <input id="token" type="password" autocomplete="off">
</label> <button>show</button> <span class="dim">(or open /#token=...)</span></form>
<div id="main" hidden>
<p>This month's spend: <span id="spend">-</span>. <span class="dim">Updated <span
id="updated">-</span>, every %(refresh)d s.</span></p>
<h2>Jobs</h2>
<table><thead><tr><th>id</th><th>name</th><th>state</th><th>target</th><th>kind</th>
<th>owner</th><th>cost</th><th>verdict</th><th>created (UTC)</th></tr></thead>
<tbody id="jobs"></tbody></table><p id="jobs-none" class="dim">no jobs yet</p>
<h2>Queue</h2>
<table><thead><tr><th>#</th><th>id</th><th>name</th><th>target</th><th>in its line</th>
<th>owner</th><th>priority</th><th>why it waits</th><th>queued (UTC)</th></tr></thead>
<tbody id="queue"></tbody></table>
<p id="queue-none" class="dim">nothing waiting</p>
<h2>Schedules</h2>
<table><thead><tr><th>id</th><th>name</th><th>cron (UTC)</th><th>owner</th><th>next run</th>
<th>last slot</th></tr></thead><tbody id="schedules"></tbody></table>
<p id="schedules-none" class="dim">no schedules</p>
</div>
<script>%(script)s</script>
</body></html>
"""


@functools.lru_cache(maxsize=1)
def html() -> str:
    return _HTML % {"refresh": REFRESH_S, "script": _SCRIPT}


@functools.lru_cache(maxsize=1)
def headers() -> dict:
    """A policy that lets the page run only its own script and talk only to this server."""
    digest = base64.b64encode(hashlib.sha256(_SCRIPT.encode()).digest()).decode()
    return {"Content-Security-Policy": f"default-src 'none'; script-src 'sha256-{digest}'; "
                                       "style-src 'unsafe-inline'; connect-src 'self'; "
                                       "form-action 'none'; frame-ancestors 'none'",
            "Referrer-Policy": "no-referrer", "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff"}
