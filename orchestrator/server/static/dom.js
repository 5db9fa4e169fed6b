// Small DOM and formatting helpers the views share.
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) e.append(c);
  return e;
}
export function money(v, cur) {
  if (v === null || v === undefined) return "-";
  return (Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(2)) + " " + (cur || "");
}
export function duration(s) {
  if (s === null || s === undefined || isNaN(s)) return "-";
  s = Math.max(0, Math.round(s));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
  const h = Math.floor(s / 3600);
  return h < 48 ? h + "h " + Math.floor((s % 3600) / 60) + "m" : Math.floor(h / 24) + "d " + (h % 24) + "h";
}
export const secondsBetween = (a, b) => (a ? ((b ? Date.parse(b) : Date.now()) - Date.parse(a)) / 1000 : null);
export function when(iso) {
  if (!iso) return "-";
  const d = new Date(iso);
  const today = new Date().toDateString() === d.toDateString();
  return today ? d.toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"})
               : d.toLocaleDateString([], {month: "short", day: "numeric"}) + " "
                 + d.toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"});
}
export const badge = (status) => el("span", {class: "badge " + status, text: status});
export const jobLink = (id, text) => el("a", {href: "#/jobs/" + id, text: text || id});
export function table(headers, rows, cls) {
  return el("table", {class: cls || ""}, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {text: h})))),
            el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c ?? "-"))))));
}
export const section = (title, ...body) => el("section", {class: "card"}, el("h2", {text: title}), ...body);

// Replace a node's children; null, undefined and false stand for nothing (a part not shown).
export function fill(node, ...kids) {
  node.replaceChildren(...kids.flat().filter((k) => k !== null && k !== undefined && k !== false));
}
