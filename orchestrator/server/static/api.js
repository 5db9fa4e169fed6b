// The API as the page talks to it: the token (given once in the fragment, #token=...; a
// fragment never reaches the server), kept in this tab's sessionStorage and sent only in the
// Authorization header, never in a URL; and what the page shows when the server does not
// answer or refuses.
export const REFRESH_MS = 3000;
const $ = (id) => document.getElementById(id);

export function takeToken() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    sessionStorage.setItem("orchToken", decodeURIComponent(m[1]));
    // Out of the address bar, onto the page the link names (#/jobs/ID?token=..., or
    // #token=...&/jobs/ID); the jobs list when it names none.
    let rest = location.hash.slice(1).replace(/(^|[?&])token=[^&]*&?/, "$1").replace(/[?&]$/, "");
    if (rest.startsWith("&")) rest = rest.slice(1);
    history.replaceState(null, "", location.pathname + (rest.startsWith("/") ? "#" + rest : "#/jobs"));
  }
  return sessionStorage.getItem("orchToken");
}

export class Refused extends Error {}
export class Unreachable extends Error {}

let lastGood = null;
export function setError(text) {
  $("error").textContent = text || "";
  $("error").hidden = !text;
}

// One request to the API. Throws Refused (its message is the server's error, with its
// hint) for an answer that is not 2xx, Unreachable when no answer came.
export async function api(path, opts = {}) {
  const token = takeToken();
  if (!token) { showLogin(); throw new Refused("no token"); }
  let resp;
  try {
    resp = await fetch(path, {...opts, cache: "no-store",
                              headers: {...(opts.headers || {}), "Authorization": "Bearer " + token}});
  } catch (e) {
    if (e.name === "AbortError") throw e;
    const since = lastGood ? " (last answer " + lastGood.toLocaleTimeString() + "; what is shown is from then)" : "";
    setError("The server does not answer" + since + ". Retrying every " + REFRESH_MS / 1000 + " s.");
    document.body.classList.add("stale");
    throw new Unreachable(String(e));
  }
  lastGood = new Date();
  document.body.classList.remove("stale");
  if (resp.status === 401) {
    sessionStorage.removeItem("orchToken");
    showLogin("The token was refused; open /#token=... with a valid one.");
    throw new Refused("refused");
  }
  if (!resp.ok) {
    let body = {};
    try { body = await resp.json(); } catch (e) { /* not JSON */ }
    throw new Refused((body.error || "HTTP " + resp.status) + (body.hint ? " (" + body.hint + ")" : ""));
  }
  setError("");
  $("updated").textContent = "updated " + lastGood.toLocaleTimeString();
  return resp;
}
export async function getJSON(path) { return (await api(path)).json(); }

export function showLogin(why) {
  $("login").hidden = false; $("main").hidden = true;
  setError(why || "");
}

