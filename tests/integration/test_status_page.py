"""The status page in a real headless browser (Debian's chromium and chromedriver, driven by
selenium): it loads with the token from the URL fragment, lists a job submitted through the
CLI in client mode, and shows it RUNNING, then SUCCEEDED, as it refreshes itself. It reads
the DOM the page builds; it starts one `orch serve`, one chromedriver (with its browser) and,
through the job, one local Ray, and stops exactly those."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from tests.conftest import run_orch, short_tmp
from tests.integration.conftest import on_session_ray, remove_home
from tests.integration.conftest import wait_until as _wait
from tests.integration.test_serve import Server

pytestmark = pytest.mark.integration

# What `apt-get install chromium chromium-driver` gives on Debian; other names elsewhere.
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


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
def home(ray_home):
    """A temporary ORCH_HOME with one token, on the session's local Ray."""
    home = on_session_ray(short_tmp("ohp"), ray_home)
    try:
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
                "--no-first-run", "--disable-extensions", "--window-size=1400,900"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console, for CSP errors
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()  # ends chromedriver and the browser it started


# Each row of the jobs table as the page shows it: (data-id, [cell texts], state cell's class).
ROWS = """return Array.from(document.querySelectorAll('#jobs tr')).map(
    (tr) => [tr.dataset.id, Array.from(tr.cells).map((td) => td.textContent), tr.cells[2].className]);"""


def test_the_status_page_shows_a_client_job_running_then_succeeded(browser, home, tmp_path):
    proc = run_orch(home, "token", "create", "alice")  # the token alone on stdout
    assert proc.returncode == 0, proc.stderr
    token = proc.stdout.strip()
    server = Server(home)

    def shown():
        return browser.execute_script("return !document.getElementById('main').hidden")

    try:
        # The page's usual address: the token in the URL fragment, taken out of the address bar.
        browser.get(f"{server.url}/#token={token}")
        _wait("the page to show its tables", shown, timeout=15)
        assert browser.current_url == server.url + "/"
        # Without a token: the form asks for one; a wrong one is refused, a right one shows it.
        browser.execute_script("sessionStorage.clear()")
        browser.get(server.url + "/")
        assert browser.find_element("id", "login").is_displayed() and not shown()
        browser.find_element("id", "token").send_keys("orch_wrong")
        browser.find_element("css selector", "#login button").click()
        _wait("the wrong token's refusal", lambda: "refused" in browser.find_element("id", "error").text, 15)
        assert browser.find_element("id", "error").text == (
            "the token was refused; open /#token=... with a valid one")
        refused = [e["message"] for e in browser.get_log("browser")]  # read, and so emptied
        assert any("/v1/summary" in m and "401" in m for m in refused), refused
        browser.find_element("id", "token").send_keys(token)
        browser.find_element("css selector", "#login button").click()
        _wait("the page to show its tables", shown, timeout=15)
        # A /#token=... link opened on the open page changes only the fragment (no reload):
        # the page takes it on `hashchange`, at once.
        browser.execute_script("sessionStorage.clear()")
        browser.get(f"{server.url}/#token={token}")
        _wait("the token to leave the address bar", lambda: "#token" not in browser.current_url, 2)
        _wait("the page to show its tables", shown, timeout=15)
        assert browser.execute_script("return document.getElementById('jobs-none').hidden") is False
        assert browser.find_element("id", "spend").text == "0.00 USD (no monthly_budget set)"
        assert browser.find_element("id", "error").text == ""

        job = tmp_path / "nap.yaml"
        job.write_text("name: nap\nrun: sleep 8 && echo rested\n")
        client = short_tmp("ohpc")  # the client's own, empty home: all it knows is the server
        try:
            proc = run_orch(client, "submit", str(job), "--detach", "--json", timeout=120,
                            ORCH_SERVER=server.url, ORCH_TOKEN=token)
        finally:
            shutil.rmtree(client, ignore_errors=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        job_id = json.loads(proc.stdout)["id"]
        t0 = time.monotonic()

        seen: list[str] = []  # each state the page showed for the job, in order

        def state(want):
            rows = {r[0]: r for r in browser.execute_script(ROWS)}
            row = rows.get(job_id)
            if row is None:
                return None
            cells = row[1]
            if not seen or seen[-1] != cells[2]:
                seen.append(cells[2])
            if cells[2] == want:
                return row
            assert cells[2] in ("PENDING", "RUNNING", "SUCCEEDED"), (
                cells, seen, server.log.read_text()[-3000:])
            return None

        _, cells, cls = _wait("the page to list the job RUNNING", lambda: state("RUNNING"),
                              timeout=120)  # the job starts the local Ray: ~15 s, more when busy
        assert cells[1] == "nap" and cells[3] == "local" and cells[5] == "alice"
        assert cls == "st RUNNING"
        t_running = time.monotonic() - t0
        _, cells, cls = _wait("the page to show it SUCCEEDED", lambda: state("SUCCEEDED"), timeout=40)
        assert cls == "st SUCCEEDED" and cells[6].endswith(" USD")
        assert seen[-2:] == ["RUNNING", "SUCCEEDED"], seen
        print(f"states shown: {seen}; RUNNING after {t_running:.1f} s, SUCCEEDED after "
              f"{time.monotonic() - t0:.1f} s")
        assert browser.execute_script("return document.getElementById('jobs-none').hidden") is True
        assert browser.find_element("id", "queue-none").is_displayed()  # launched: nothing waits
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, (errors, server.log.read_text()[-6000:])  # e.g. a CSP block, a 500
    finally:
        server.stop()
