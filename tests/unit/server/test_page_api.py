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
