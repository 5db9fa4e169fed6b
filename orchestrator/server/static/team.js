// The team's views: the fleet (owned GPUs with what runs and waits on each; rented jobs with
// their price and time so far), the month's money against the budget, and the schedules.
import { getJSON } from "./api.js";
import { lineChart, stackedBars } from "./charts.js";
import { badge, duration, el, fill, jobLink, money, secondsBetween, section, table, when } from "./dom.js";

const n = (v) => (v === null || v === undefined ? "-" : Number.isInteger(v) ? String(v) : v.toFixed(1));

function usage(label, used, total) {
  if (!total) return null;
  return el("div", {class: "usage"}, el("span", {text: `${label} ${n(used || 0)} of ${n(total)} in use`}),
            el("progress", {value: used || 0, max: total}));
}

export function fleetView(main) {
  const owned = el("div", {id: "owned", class: "grid2"});
  const rented = el("div", {id: "rented"});
  main.append(el("h1", {text: "Fleet"}), owned, section("Rented, running now", rented));
  async function refresh() {
    const f = await getJSON("/v1/fleet");
    const cur = f.currency;
    fill(owned, ...f.owned.map((t) => section(t.target === "local" ? "This workstation (local)" : "On-prem cluster (onprem)",
      t.problem ? el("p", {class: "note", text: t.problem}) : null,
      usage("GPUs", t.gpus_used, t.gpus), usage("CPUs", t.cpus_used, t.cpus),
      t.nodes.length ? table(["node", "GPUs", "model", "CPUs", "up", "running on it"], t.nodes.map((x) =>
        [x.ip + (x.head ? " (head)" : ""), n(x.gpus), x.gpu_model || "-", n(x.cpus), x.alive ? "yes" : "no",
         x.jobs.length ? el("span", {}, x.jobs.map((id) => jobLink(id, (t.running.find((j) => j.id === id) || {}).name || id))) : "-"])) : null,
      el("h3", {text: `running (${t.running.length})`}),
      t.running.length ? table(["job", "owner", "nodes", "GPUs", "for", "cost so far"], t.running.map((j) =>
        [jobLink(j.id, j.name), j.owner || "-", j.nodes.join(", ") || "-", j.gpus ? j.gpus + "× " + (j.gpu || "GPU") : "cpu",
         duration(j.hours * 3600), money(j.cost, cur)])) : el("p", {class: "dim", text: "idle"}),
      el("h3", {text: `queued (${t.queued.length})`}),
      t.queued.length ? table(["job", "owner", "priority", "waits for"], t.queued.map((j) =>
        [jobLink(j.id, j.name), j.owner || "-", String(j.priority), j.waiting_for || "-"])) : el("p", {class: "dim", text: "nothing waiting"}))));
    fill(rented, f.rented.length ? table(["job", "owner", "where", "GPUs", "price/h", "for", "so far"],
      f.rented.map((j) => [jobLink(j.id, j.name), j.owner || "-", j.where || j.infra || "-",
        (j.gpus ? j.gpus + "× " + (j.gpu || "GPU") : "cpu") + (j.spot ? " spot" : ""), money(j.price_per_hour, cur),
        duration(j.hours * 3600), money(j.cost, cur)])) : el("p", {class: "dim", text: "nothing rented is running"}));
  }
  return {refresh};
}

export function moneyView(main) {
  const top = el("div", {id: "money-top"});
  const daily = el("div", {id: "daily", class: "charts"});
  const groups = el("div", {class: "grid2"});
  const biggest = el("div", {id: "biggest"});
  main.append(el("h1", {text: "Money"}), section("This month", top), section("Per day", daily), groups,
              section("Biggest jobs this month", biggest));
  async function refresh() {
    const s = await getJSON("/v1/spend");
    const cur = s.currency, fmt = (v) => money(v, cur);
    const share = s.budget ? s.spent / s.budget : null;
    const days = s.days.filter((d) => d.day <= s.today);
    const dayOfMonth = days.length, inMonth = s.days.length;
    const pace = dayOfMonth ? s.spent / dayOfMonth * inMonth : 0;
    fill(top, 
      el("p", {class: "big" + (share !== null && share >= 1 ? " over" : "")}, fmt(s.spent),
         el("span", {class: "dim", text: s.budget ? ` of ${fmt(s.budget)} (${Math.round(share * 100)}%), counted as ${s.basis}` : " spent; no monthly_budget set"})),
      share === null ? null : el("progress", {value: Math.min(share, 1), max: 1}),
      el("p", {class: "dim", text: `${s.month}: at this pace, ${fmt(pace)} by the month's end` + (s.budget && pace > s.budget ? " — over the budget" : "")}));
    let run = 0;
    const cumulative = s.days.map((d) => (d.day <= s.today ? (run += d.spend) : 0));
    const perDay = dayOfMonth ? s.spent / dayOfMonth : 0;
    fill(daily,
      el("figure", {}, el("figcaption", {text: "cash per day: owned power (lower) and cloud (upper)"}),
         stackedBars("cash per day", s.days.map((d) => ({...d, label: d.day.slice(5)})),
                     [{key: "owned", label: "owned power"}, {key: "cloud", label: "cloud"}], fmt)),
      el("figure", {}, el("figcaption", {text: "spent so far (bars), at this pace (line), against the budget (dashed)"}),
         stackedBars("spent so far", s.days.map((d, i) => ({label: d.day.slice(5), total: cumulative[i]})),
                     [{key: "total", label: "spent"}], fmt,
                     {limit: s.budget, line: {values: s.days.map((d, i) => perDay * (i + 1)), label: "at this pace"}})));
    fill(groups, 
      section("By target", table(["target", "jobs", "cash", "full cost"], s.by_target.map((g) => [g.target, String(g.jobs), fmt(g.cash), fmt(g.cost)]))),
      section("By owner", table(["owner", "jobs", "cash", "full cost"], s.by_owner.map((g) => [g.owner, String(g.jobs), fmt(g.cash), fmt(g.cost)]))));
    fill(biggest, s.biggest.length ? table(["job", "owner", "target", "state", "hours", "cash", "full cost"],
      s.biggest.map((j) => [jobLink(j.id, j.name), j.owner || "-", j.target || "-", badge(j.status), n(j.hours), fmt(j.cash), fmt(j.cost)]))
      : el("p", {class: "dim", text: "nothing spent this month"}));
  }
  return {refresh};
}

export function schedulesView(main) {
  const list = el("div", {id: "schedules"});
  main.append(el("h1", {text: "Schedules"}), list);
  const jobs = new Map();  // job id -> its record, read once it has ended
  async function refresh() {
    const [all, slots] = await Promise.all([getJSON("/v1/schedules"), getJSON("/v1/schedule-slots?count=3")]);
    const wanted = all.flatMap((s) => (s.log || []).filter((e) => e.job_id).slice(-5).map((e) => e.job_id));
    await Promise.all(wanted.filter((id) => !jobs.has(id) || !["SUCCEEDED", "FAILED", "CANCELLED"].includes(jobs.get(id).status))
      .map(async (id) => { try { jobs.set(id, await getJSON("/v1/jobs/" + encodeURIComponent(id))); } catch (e) { /* gone */ } }));
    fill(list, ...(all.length ? all.map((s) => {
      const runs = (s.log || []).filter((e) => e.job_id).slice(-5).reverse();
      const durations = runs.map((e) => jobs.get(e.job_id)).filter((j) => j && j.finished_at)
        .map((j, i) => ({x: i + 1, y: secondsBetween(j.started_at || j.created_at, j.finished_at)})).reverse();
      return section(s.name,
        el("p", {}, el("span", {class: "kv"}, el("span", {class: "dim", text: "cron (UTC) "}), el("code", {text: s.cron})),
           el("span", {class: "kv"}, el("span", {class: "dim", text: "owner "}), s.owner || "-"),
           el("span", {class: "kv"}, el("span", {class: "dim", text: "next runs "}),
              s.paused ? "paused" : (slots[s.id] || []).map(when).join(", ") || "-")),
        runs.length ? table(["slot", "job", "state", "took"], runs.map((e) => {
          const j = jobs.get(e.job_id);
          return [when(e.slot || e.at), jobLink(e.job_id, j ? j.name : e.job_id), j ? badge(j.status) : "-",
                  j ? duration(secondsBetween(j.started_at || j.created_at, j.finished_at)) : "-"];
        })) : el("p", {class: "dim", text: "no runs yet"}),
        durations.length > 1 ? lineChart("run durations (s)", durations) : null);
    }) : [el("p", {class: "dim", text: "no schedules (a job file with schedule.cron registers one)"})]));
  }
  return {refresh};
}
