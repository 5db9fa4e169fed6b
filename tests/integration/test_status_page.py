"""The status page in a real headless browser (Debian's chromium and chromedriver, driven by
selenium) against a real `orch serve` on a real PostgreSQL store: the jobs list and its
filters, a running job's page (its log and its chart growing), cancelling it as its owner
after another user is refused, the fleet, money and schedules views, the list's first paint
with 100,000 jobs in the store, and what the page shows when the server is gone. It reads
the DOM the page builds, writes a screenshot of each view (ORCH_TEST_SCREENSHOTS, else the
test's tmp folder) and checks the server's access log for the token. It starts one
`orch serve`, one chromedriver (with its browser) and, through the job, uses the session's
local Ray, and stops exactly those."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import urllib.request
from pathlib import Path

import pytest

from orchestrator.server import auth
from tests.conftest import home_store, run_orch, short_tmp, store_at
from tests.integration.conftest import on_session_ray, remove_home
from tests.integration.conftest import wait_until as _wait
from tests.integration.status_page_data import TICKER, finished_train_job, seed_month
from tests.integration.test_serve import Server

pytestmark = pytest.mark.integration

# What `apt-get install chromium chromium-driver` gives on Debian; other names elsewhere.
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BUDGET = 250.0


def _browser():
    """(chromium, chromedriver) paths, or a skip that says what is missing."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.skip("status page browser test: selenium is not installed (pip install -e '.[test]')")
    binary = next((p for p in map(shutil.which, BROWSERS) if p), None)
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        missing = " and ".join(n for n, p in (("chromium", binary), ("chromedriver", driver)) if not p)
        pytest.skip(f"status page browser test: no {missing} on PATH "
                    "(apt-get install chromium chromium-driver; `make test` does it as root)")
    return binary, driver


@pytest.fixture
def home(ray_home, postgres_server):
    """A temporary ORCH_HOME on the session's local Ray, its store a fresh schema of the
    tests' PostgreSQL, with tokens for alice and bob (tokens.json)."""
    home = on_session_ray(short_tmp("ohp"), ray_home)
    try:
        with home_store(home, postgres_server):
            store = store_at(home)
            tokens = {}
            for name in ("alice", "bob"):
                tokens[name], digest = auth.new_token()
                store.add_token(name, digest)
            store.close()
            (home / "tokens.json").write_text(json.dumps(tokens))
            yield home
    finally:
        remove_home(home)


@pytest.fixture
def browser():
    binary, driver_path = _browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--no-first-run", "--disable-extensions", "--window-size=1280,900"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console, for CSP errors
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()  # ends chromedriver and the browser it started


@pytest.fixture
def shots(tmp_path):
    """Where the screenshots go: ORCH_TEST_SCREENSHOTS, else this test's tmp folder."""
    where = Path(os.environ.get("ORCH_TEST_SCREENSHOTS") or tmp_path / "screenshots")
    where.mkdir(parents=True, exist_ok=True)
    return where


def _tokens(home: Path) -> dict:
    return json.loads((home / "tokens.json").read_text())


def _text(browser, css: str) -> str:
    return browser.execute_script("const e = document.querySelector(arguments[0]); return e ? e.textContent : null", css)


def _count(browser, css: str) -> int:
    return browser.execute_script("return document.querySelectorAll(arguments[0]).length", css)


def _click(browser, css: str, timeout: float = 15) -> None:
    """Click the element `css` names once it is there and can be clicked: the page redraws
    its parts every few seconds, so an element found a moment ago may have been replaced."""
    from selenium.common.exceptions import (
        ElementNotInteractableException,
        NoSuchElementException,
        StaleElementReferenceException,
    )

    def clicked():
        try:
            browser.find_element("css selector", css).click()
            return True
        except (ElementNotInteractableException, NoSuchElementException, StaleElementReferenceException):
            return False
    _wait(f"{css} to be clickable", clicked, timeout)


def _shot(browser, shots: Path, name: str) -> Path:
    """The whole page (up to 2,400 px tall) as a PNG in `shots`."""
    browser.execute_script("window.scrollTo(0, 0)")
    width, height = browser.execute_script("return [window.outerWidth, window.outerHeight]")
    tall = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(width, min(2400, max(height, tall + height - browser.execute_script(
        "return window.innerHeight"))))
    path = shots / f"status-page-{name}.png"
    try:
        browser.save_screenshot(str(path))
    finally:
        browser.set_window_size(width, height)
    print(f"screenshot: {path}")
    return path


# Each row of the jobs table: (data-id, [cell texts]).
ROWS = """return Array.from(document.querySelectorAll('#jobs tr')).map(
    (tr) => [tr.dataset.id, Array.from(tr.cells).map((td) => td.textContent)]);"""


def _rows(browser) -> dict:
    return {r[0]: r[1] for r in browser.execute_script(ROWS)}


def _failed(browser, shots: Path, server) -> None:
    """What the page showed and said when a check failed, and the server's log's tail."""
    _shot(browser, shots, "failed")
    print("browser console:", *browser.get_log("browser"), sep="\n  ")
    print("server log:", server.log.read_text()[-4000:])


def test_the_page_lists_filters_follows_cancels_and_shows_fleet_and_money(browser, home, shots, tmp_path):
    tokens = _tokens(home)
    seed_month(home, time.time())
    finished = finished_train_job(home)
    server = Server(home, env={"ORCH_MONTHLY_BUDGET": str(BUDGET)}, args=("--access-log",))
    try:
        # The token from the URL fragment, taken out of the address bar; the list shows.
        browser.get(f"{server.url}/#token={tokens['alice']}")
        _wait("the jobs list", lambda: len(_rows(browser)) == 13, timeout=20)
        assert "token" not in browser.current_url and browser.current_url.endswith("/#/jobs")
        assert re.fullmatch(r"\d{4}-\d\d: \d+\.\d\d USD of 250 USD \(\d+%\)", _text(browser, "#spend"))
        _shot(browser, shots, "jobs")
        # At a glance: what runs, waits and ended lately; a click filters the list by it.
        assert re.fullmatch(r"0 running · 0 waiting · \d+ failed and \d+ succeeded in the last 24 h",
                            _text(browser, "#glance")), _text(browser, "#glance")
        _click(browser, "#glance button[data-status=FAILED]")
        _wait("the FAILED jobs", lambda: sorted(c[1] for c in _rows(browser).values()) == [
            "digits-5", "resnet-0", "resnet-10"], timeout=10)
        from selenium.webdriver.support.select import Select

        Select(browser.find_element("css selector", "#filters select[name=status]")).select_by_value("")
        _wait("every job again", lambda: len(_rows(browser)) == 13, timeout=10)
        # Filters: the owner, then a part of the name as well; kept in the address.
        owner = browser.find_element("css selector", "#filters input[name=owner]")
        owner.send_keys("bob")
        _wait("bob's jobs only", lambda: {c[5] for c in _rows(browser).values()} == {"bob"}, timeout=10)
        assert len(_rows(browser)) == 6 and "owner=bob" in browser.current_url
        browser.find_element("css selector", "#filters input[name=q]").send_keys("GITS-1")
        _wait("bob's digits-1*", lambda: sorted(c[1] for c in _rows(browser).values()) == [
            "digits-1", "digits-11"], timeout=10)
        # The list refreshes in place every 3 s: the filters stay as typed.
        before = _text(browser, "#updated")
        _wait("a refresh", lambda: _text(browser, "#updated") != before, 10)
        assert owner.get_attribute("value") == "bob" and len(_rows(browser)) == 2
        # A wrong token: the login form says so; the right one shows the page again.
        browser.execute_script("sessionStorage.setItem('orchToken', 'orch_wrong'); location.hash = '#/jobs'")
        _wait("the wrong token's refusal", lambda: browser.find_element("id", "login").is_displayed(), 15)
        assert _text(browser, "#error") == "The token was refused; open /#token=... with a valid one."
        browser.get_log("browser")  # the 401s, read and so emptied
        browser.find_element("id", "token").send_keys(tokens["alice"])
        _click(browser, "#login button")
        _wait("the list again", lambda: len(_rows(browser)) == 13, timeout=15)

        # A finished train job's page: curves, step-time split, phases, devices, offers;
        # opened from a link that carries the token: it lands on the page it names.
        browser.execute_script("sessionStorage.removeItem('orchToken'); location.hash = arguments[0]",
                               f"#/jobs/{finished}?token={tokens['alice']}")
        _wait("its four curves", lambda: _count(browser, "#charts figure") == 4, timeout=15)
        assert browser.current_url.endswith(f"/#/jobs/{finished}"), browser.current_url
        assert _count(browser, "figure[data-metric=loss] circle") == 8
        assert _count(browser, "#placement table.offers tbody tr") == 3
        assert "costs 1.09 more" in _text(browser, "#placement") and "needs 2 GPUs" in _text(browser, "#placement")
        assert "input-bound" in _text(browser, "#split") and "waits for data 31%" in _text(browser, "#split")
        assert "training 1m 20s" in _text(browser, "#phases") and "RTX 4090" in _text(browser, "#telemetry")
        # Its log is the job's own output; orch's event lines when the box is ticked.
        _wait("its log", lambda: "Epoch 8" in (_text(browser, "#log") or ""), timeout=10)
        assert "::orch::" not in _text(browser, "#log")
        _click(browser, "#log-events")
        _wait("its events", lambda: '"index": 8' in (_text(browser, "#log") or ""), timeout=10)
        assert browser.find_element("id", "cancel").is_displayed() is False  # it has ended
        _shot(browser, shots, "job-finished")
        browser.back()
        _wait("the list", lambda: len(_rows(browser)) == 13, timeout=15)

        # A running job, submitted through the CLI in client mode: its page, log and chart grow.
        script = tmp_path / "tick.sh"
        script.write_text(TICKER)
        job = tmp_path / "ticker.yaml"
        job.write_text(f"name: ticker\nrun: sh {script}\n")
        client = short_tmp("ohpc")  # the client's own, empty home: all it knows is the server
        try:
            proc = run_orch(client, "submit", str(job), "--detach", "--json", timeout=120,
                            ORCH_SERVER=server.url, ORCH_TOKEN=tokens["alice"])
        finally:
            shutil.rmtree(client, ignore_errors=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        job_id = json.loads(proc.stdout)["id"]
        _wait("the list to show the new job", lambda: job_id in _rows(browser), timeout=40)
        _click(browser, f"#jobs tr[data-id='{job_id}'] a")
        _wait("its page", lambda: _text(browser, ".jobhead h1") is not None, timeout=15)
        assert browser.current_url.endswith(f"#/jobs/{job_id}")
        _wait("it RUNNING", lambda: _text(browser, ".jobhead .badge") == "RUNNING", timeout=120)
        _wait("its first points", lambda: _count(browser, "figure[data-metric=loss] circle") >= 2, 60)
        log0, dots0 = len(_text(browser, "#log")), _count(browser, "figure[data-metric=loss] circle")
        _wait("its log to grow", lambda: len(_text(browser, "#log")) > log0, timeout=30)
        _wait("its chart to gain a point", lambda: _count(browser, "figure[data-metric=loss] circle") > dots0, 30)
        assert "tick 1\n" in _text(browser, "#log") and _text(browser, "#log-note") == "(following)"
        assert "::orch::" not in _text(browser, "#log")  # its reports are the chart, not log lines
        assert "loss" in _text(browser, "#charts")
        _shot(browser, shots, "job")

        # The fleet: the job on this workstation.
        _click(browser, "#nav a[data-view=fleet]")
        _wait("the fleet with the job on local", lambda: job_id in (browser.execute_script(
            "return Array.from(document.querySelectorAll('#owned a')).map((a) => a.href).join(' ')") or ""), 20)
        assert "This workstation (local)" in _text(browser, "#owned")
        _shot(browser, shots, "fleet")

        # Another user may not cancel it: the page shows the API's refusal; its owner may.
        browser.execute_script("sessionStorage.setItem('orchToken', arguments[0]); location.hash = arguments[1]",
                               tokens["bob"], f"#/jobs/{job_id}")
        _wait("its page as bob", lambda: _text(browser, ".jobhead .badge") == "RUNNING", 20)
        _click(browser, "#cancel")
        _wait("bob's refusal", lambda: (_text(browser, "#cancel-msg") or "").startswith("refused"), 20)
        assert _text(browser, "#cancel-msg") == (f"refused: {job_id} belongs to alice: bob may not cancel it "
                                                 "(only its submitter or an admin token (`orch token create "
                                                 "NAME --admin`) can)")
        browser.get_log("browser")  # the 403, read and so emptied
        browser.execute_script("sessionStorage.setItem('orchToken', arguments[0]); "  # the old page gone first
                               "document.getElementById('main').replaceChildren(); location.reload()", tokens["alice"])
        _wait("its page as alice", lambda: _text(browser, ".jobhead .badge") == "RUNNING", 20)
        _click(browser, "#cancel")
        _wait("it CANCELLED", lambda: _text(browser, ".jobhead .badge") == "CANCELLED", 60)
        assert _text(browser, "#cancel-msg") == "cancelled" and browser.find_element("id", "cancel").is_displayed() is False

        # Money: the month's spend per day against the budget, by target and owner.
        browser.execute_script("location.hash = '#/money'")
        _wait("the money view", lambda: _count(browser, "#daily svg rect.bar") > 0, 20)
        assert _text(browser, "#money-top").startswith(_text(browser, "#spend").split(": ")[1].split(" of")[0])
        assert "budget 250 USD" in _text(browser, "#daily")
        _shot(browser, shots, "money")
        # Dark mode, as the system asks for it: the same view in the dark scheme.
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [
            {"name": "prefers-color-scheme", "value": "dark"}]})
        assert browser.execute_script("return getComputedStyle(document.body).backgroundColor") == "rgb(17, 21, 28)"
        _shot(browser, shots, "money-dark")
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        # Schedules: one registered through the API.
        body = json.dumps({"spec": "name: nightly\nrun: echo hi\nschedule: {cron: '0 3 * * *'}\n"}).encode()
        req = urllib.request.Request(server.url + "/v1/jobs", data=body, method="POST", headers={
            "Authorization": f"Bearer {tokens['alice']}", "Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).close()
        browser.execute_script("location.hash = '#/schedules'")
        _wait("the schedule", lambda: "nightly" in (_text(browser, "#schedules") or ""), 20)
        _shot(browser, shots, "schedules")

        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, (errors, server.log.read_text()[-6000:])  # e.g. a CSP block, a 500
    except Exception:
        _failed(browser, shots, server)
        raise
    finally:
        server.stop()
    # No request carried the token in its URL: the access log has every request line.
    lines = [ln for ln in server.log.read_text().splitlines() if '"GET /' in ln or '"POST /' in ln]
    assert any("/v1/jobs?" in ln for ln in lines) and any("/progress" in ln for ln in lines), lines[-20:]
    for ln in lines:
        assert "token" not in ln.lower() and not any(t in ln for t in tokens.values()), ln
    print(f"{len(lines)} requests in the access log, none with a token in its URL")


def test_the_list_paints_within_a_second_with_100000_jobs_and_says_when_the_server_is_gone(
        browser, home, shots):
    from tests.unit.store.test_job_pages import fill

    store = store_at(home)
    t = time.perf_counter()
    fill(store, 100_000, t0=time.time() - 400 * 86400)  # ended long ago: no spend this month
    store.close()
    print(f"100,000 jobs written in {time.perf_counter() - t:.1f} s")
    server = Server(home)
    try:
        browser.get(f"{server.url}/#token={_tokens(home)['alice']}")
        _wait("the list", lambda: len(_rows(browser)) == 50, timeout=30)
        for _ in range(3):  # loaded afresh: the page's own timing, from navigation start
            browser.execute_script("location.reload()")
            _wait("the list", lambda: browser.execute_script(
                "return performance.getEntriesByName('orch-jobs-shown').length"), timeout=30)
            fcp, shown = browser.execute_script(
                "return [performance.getEntriesByName('first-contentful-paint')[0]?.startTime,"
                " performance.getEntriesByName('orch-jobs-shown')[0].startTime]")
            print(f"100,000 jobs: first contentful paint {fcp:.0f} ms, the first 50 rows shown at {shown:.0f} ms")
        assert len(_rows(browser)) == 50
        assert fcp < 1000 and shown < 1000, (fcp, shown)
        _click(browser, "#next")  # the next page, by its cursor
        _wait("page 2", lambda: _text(browser, "#page-no") == "page 2", 10)
        _wait("its rows", lambda: "orch-0001866d" in _rows(browser), 10)  # the 51st newest
        # A filter over 100,000 jobs: from the choice to its rows on the page.
        from selenium.webdriver.support.select import Select

        t = time.monotonic()
        Select(browser.find_element("css selector", "#filters select[name=status]")).select_by_value("FAILED")
        _wait("FAILED jobs only", lambda: (rows := _rows(browser)) and {c[2] for c in rows.values()} == {"FAILED"}, 10)
        print(f"100,000 jobs: FAILED ones shown {time.monotonic() - t:.2f} s after the choice (polled every 0.3 s)")
        assert _text(browser, "#page-no") == "page 1"
    finally:
        server.stop()
    # The server is gone: the page says so, and keeps what it showed.
    _wait("the page to say the server does not answer",
          lambda: (_text(browser, "#error") or "").startswith("The server does not answer"), 15)
    assert len(_rows(browser)) == 50
    _shot(browser, shots, "unreachable")
