"""What the status page reads beyond the CLI's endpoints, in-process: a page of jobs with its
filters and cursor."""

from __future__ import annotations

from tests.unit.store.test_job_pages import fill


def test_jobs_are_paged_filtered_and_sorted_with_a_cursor_header(api):
    fill(api.store, 30)
    r = api("GET", "/v1/jobs?limit=12", "alice")
    assert r.status_code == 200 and len(r.json()) == 12
    seen, cursor = [j["id"] for j in r.json()], r.headers["x-next-cursor"]
    while cursor:
        r = api("GET", f"/v1/jobs?limit=12&cursor={cursor}", "alice")
        seen += [j["id"] for j in r.json()]
        cursor = r.headers.get("x-next-cursor")
    assert seen == [f"orch-{i:08x}" for i in reversed(range(30))]
    bob = api("GET", "/v1/jobs?owner=bob&target=onprem&sort=name", "alice").json()
    assert bob and all(j["owner"] == "bob" and j["target"] == "onprem" for j in bob)
    assert [j["name"] for j in bob] == sorted(j["name"] for j in bob)
    assert [j["name"] for j in api("GET", "/v1/jobs?q=TINY-2", "alice").json()] == [
        "tiny-28", "tiny-26", "tiny-24", "tiny-22", "tiny-20", "tiny-2"]
    assert "x-next-cursor" not in api("GET", "/v1/jobs?status=FAILED", "alice").headers
    for bad, error in (("status=LOST", "status 'LOST': not a job state"),
                       ("sort=cost", "sort 'cost': not a sort"),
                       ("cursor=zz", "cursor: not one this server handed out"),
                       ("limit=0", "query.limit: Input should be greater than or equal to 1")):
        r = api("GET", f"/v1/jobs?{bad}", "alice")
        assert r.status_code == 400 and r.json()["error"] == error, (bad, r.text)


def _report(i: int, loss: float) -> str:
    return ('::orch::{"event": "report", "index": %d, "t": %d, "metrics": {"epoch": %d, "loss": %s, '  # noqa: UP031
            '"accuracy": 0.5, "epochs": 9, "device": "cpu", "pin_memory": false}}') % (i, 100 + i, i, loss)


def test_a_jobs_progress_is_its_reports_and_its_cost_so_far(api, tmp_path):
    from orchestrator.service.dashboard import series

    log = "\n".join(["starting", _report(1, 0.9), "(RayTrainWorker pid=1) noise", _report(2, 0.5),
                     '::orch::{"event": "report", "index": 3, "metrics": "not a dict"}', "done"])
    assert [p.model_dump() for p in series(log)] == [
        {"index": 1, "t": 101, "metrics": {"epoch": 1, "loss": 0.9, "accuracy": 0.5}},
                           {"index": 2, "t": 102, "metrics": {"epoch": 2, "loss": 0.5, "accuracy": 0.5}}]
    path = tmp_path / "job.log"
    path.write_text(log)
    rec = api.store.create_job(name="ran", spec={}, kind="exploratory", target="local", fingerprint=None,
                               owner="alice", decision={"target": "local", "estimate": {"cost_usd": 2.0, "hours": 1.0},
                                                        "choice": {"target": "local", "price_per_hour_usd": 1.5,
                                                                   "power_per_hour_usd": 0.25,
                                                                   "amortized_per_hour_usd": 1.25}})
    api.store.set_status(rec.id, "RUNNING", "started")
    api.store.set_status(rec.id, "SUCCEEDED", "done", log_path=str(path))
    api.store._db.execute("UPDATE jobs SET started_at = finished_at - 7200 WHERE id = ?", (rec.id,))
    got = api("GET", f"/v1/jobs/{rec.id}/progress", "bob").json()
    assert [p["metrics"]["loss"] for p in got["points"]] == [0.9, 0.5]
    assert got["cost"] == {"so_far": 3.0, "cash_so_far": 0.5, "hours": 2.0, "power_basis": "rated",
                           "estimate": 2.0, "estimate_hours": 1.0}
    assert api("GET", "/v1/jobs/orch-nothere/progress", "bob").status_code == 404


def test_the_months_spend_by_day_target_and_owner(api, monkeypatch):
    import time

    from orchestrator.decision.job_ledger import month_start

    now = time.time()
    day = time.strftime("%Y-%m-%d", time.gmtime(now))
    for name, owner, target, price, power in (("a", "alice", "local", 1.0, 0.2), ("b", "bob", "cloud", 3.0, None),
                                              ("old", "bob", "local", 1.0, 0.2)):
        choice = {"target": target, "price_per_hour_usd": price}
        if power:
            choice.update(power_per_hour_usd=power, amortized_per_hour_usd=price - power)
        rec = api.store.create_job(name=name, spec={}, kind="exploratory", target=target, fingerprint=None,
                                   owner=owner, decision={"target": target, "choice": choice},
                                   info={"ledger": {"cost_usd": 6.0, "billed_hours": 2.0}} if target == "cloud" else None)
        api.store.set_status(rec.id, "RUNNING", "started")
        api.store.set_status(rec.id, "SUCCEEDED", "done")
        end = month_start(now) - 3600 if name == "old" else now
        api.store._db.execute("UPDATE jobs SET started_at = ?, finished_at = ? WHERE id = ?",
                              (end - 7200, end, rec.id))
    s = api("GET", "/v1/spend", "alice").json()
    assert s["month"] == day[:7] and s["budget"] is None and s["basis"] == "cash"
    today = next(d for d in s["days"] if d["day"] == day)
    assert (round(today["owned"], 6), round(today["cloud"], 6)) == (0.4, 6.0)  # a's power, b's bill
    assert round(s["spent"], 6) == 6.4 and len(s["days"]) >= 28
    assert [(g["target"], g["jobs"], round(g["cash"], 6)) for g in s["by_target"]] == [("cloud", 1, 6.0), ("local", 1, 0.4)]
    assert [(g["owner"], round(g["cost"], 6)) for g in s["by_owner"]] == [("bob", 6.0), ("alice", 2.0)]
    assert [j["name"] for j in s["biggest"]] == ["b", "a"]  # "old" ended last month


def test_the_fleet_shows_owned_targets_and_what_runs_rented(api):
    rec = api.store.create_job(name="gpu", spec={}, kind="exploratory", target="cloud", fingerprint=None,
                               owner="bob", decision={"target": "cloud", "choice": {
                                   "target": "cloud", "cloud": "aws", "region": "us-east-1", "gpu": "A100",
                                   "count": 8, "price_per_hour_usd": 12.0, "spot": True}})
    api.store.update(rec.id, backend_id="sky-1")
    api.store._db.execute("UPDATE jobs SET status = 'RUNNING', started_at = ? WHERE id = ?",
                          (__import__("time").time() - 1800, rec.id))
    api.store.create_job(name="waits", spec={}, kind="exploratory", target="local", fingerprint=None,
                         owner="alice", info={"queued": True})
    f = api("GET", "/v1/fleet", "alice").json()
    assert [t["target"] for t in f["owned"]] == ["local", "onprem"]
    local = f["owned"][0]
    assert local["cpus"] and [q["name"] for q in local["queued"]] == ["waits"] and local["running"] == []
    assert f["owned"][1]["problem"] == "no on-prem cluster is set up here (ray_address, ORCH_RAY_ADDRESS)"
    [gpu] = f["rented"]
    assert (gpu["name"], gpu["where"], gpu["gpus"], gpu["spot"], gpu["price_per_hour"]) == (
        "gpu", "aws/us-east-1", 8, True, 12.0)


def test_the_page_ships_in_the_wheel(tmp_path):
    """Every file of the page is package data (pyproject.toml), so a fresh install serves it."""
    import fnmatch

    import tomllib

    from orchestrator.server import page
    from tests.conftest import ROOT

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "orchestrator.server"]
    files = page.names()
    assert {"index.html", "app.js", "app.css"} <= set(files)
    for name in files:
        assert any(fnmatch.fnmatch(f"static/{name}", p) for p in patterns), name


def test_each_schedules_next_slots(api):
    s = api("POST", "/v1/jobs", "alice", json={"spec": "name: n\nrun: echo\nschedule: {cron: '0 3 * * *'}\n"}).json()
    slots = api("GET", "/v1/schedule-slots?count=3", "bob").json()[s["schedule"]["id"]]
    assert slots[0] == s["schedule"]["next_at"] and len(slots) == 3
    assert all(t.endswith("T03:00:00Z") for t in slots) and slots == sorted(set(slots))
    api("POST", f"/v1/schedules/{s['schedule']['id']}/pause", "alice")
    assert api("GET", "/v1/schedule-slots", "bob").json() == {s["schedule"]["id"]: []}


def test_a_train_jobs_nodes_are_its_workers():
    from orchestrator.service.dashboard import worker_nodes

    log = "\n".join(['::orch::{"event": "worker", "rank": 1, "node_id": "bbb"}', "noise",
                     '(RayTrainWorker pid=7) ::orch::{"event": "worker", "rank": 0, "node_id": "aaa"}',
                     '::orch::{"event": "worker", "rank": 2, "node_id": "aaa"}',
                     '::orch::{"event": "worker", "rank": 3}'])
    assert worker_nodes(log) == ["aaa", "bbb"] and worker_nodes("") == []


def test_job_counts_by_state_in_all_and_lately(api):
    import time

    t0 = time.time() - 3600
    fill(api.store, 30, t0=t0)
    api.store._db.execute("UPDATE jobs SET finished_at = finished_at - 2 * 86400 WHERE created_at < ?", (t0 + 10,))
    counts = api("GET", "/v1/job-counts", "bob").json()
    assert counts["hours"] == 24
    states = counts["states"]
    assert states["FAILED"] == {"all": 5, "recent": 3}  # 0 and 7 ended two days ago
    assert states["SUCCEEDED"]["all"] == 25 and states["RUNNING"] == {"all": 0, "recent": 0}
    assert api("GET", "/v1/job-counts?hours=0", "bob").status_code == 400
