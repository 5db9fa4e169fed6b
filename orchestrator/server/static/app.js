// The status page's shell: the router and the refresh loop. Each view (jobs.js, job.js,
// team.js) renders into <main> once and refreshes itself in place every REFRESH_MS.
import { REFRESH_MS, Refused, Unreachable, getJSON, showLogin, takeToken } from "./api.js";
import { money } from "./dom.js";
import { jobView } from "./job.js";
import { jobsView } from "./jobs.js";
import { fleetView, moneyView, schedulesView } from "./team.js";

const $ = (id) => document.getElementById(id);
const ROUTES = [
  [/^#\/jobs\/([^/?]+)$/, jobView],
  [/^#\/fleet$/, fleetView], [/^#\/money$/, moneyView], [/^#\/schedules$/, schedulesView],
  [/^#\/jobs(\?.*)?$/, jobsView],
];

// -- the router and the refresh loop ------------------------------------------------------
let current = null;  // {refresh, stop} of the view shown

async function tick() {
  if (!current || document.hidden) return;
  try { await current.refresh(); } catch (e) {
    if (!(e instanceof Unreachable || e instanceof Refused || e.name === "AbortError")) throw e;
  }
}

async function header() {
  try {
    const s = await getJSON("/v1/spend");
    const pct = s.budget ? " of " + money(s.budget, s.currency) + " (" + Math.round(100 * s.spent / s.budget) + "%)" : "";
    $("spend").textContent = s.month + ": " + money(s.spent, s.currency) + (s.budget ? pct : " (no monthly_budget set)");
    $("spend").className = "spend" + (s.budget && s.spent >= s.budget ? " over" : "");
  } catch (e) { /* shown by api() */ }
}

function route() {
  if (location.hash.includes("token=")) takeToken();
  if (!sessionStorage.getItem("orchToken")) { showLogin(); return; }
  $("login").hidden = true; $("main").hidden = false;
  const hash = location.hash || "#/jobs";
  const [re, view] = ROUTES.find(([r]) => r.test(hash)) || ROUTES[ROUTES.length - 1];
  const m = hash.match(re);
  if (current && current.stop) current.stop();
  const main = $("main");
  main.replaceChildren();
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("here", hash.startsWith("#/" + a.dataset.view));
  }
  current = view(main, m ? m[1] : null);
  header();
  tick();
}

$("login").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem("orchToken", $("token").value.trim());
  $("token").value = "";
  route();
});
window.addEventListener("hashchange", route);
document.addEventListener("visibilitychange", tick);
route();
setInterval(tick, REFRESH_MS);
setInterval(header, 5 * REFRESH_MS);
