"""The app page in a real browser: Debian's chromium, headless, driven by Selenium through its
chromedriver, against ``mediajobs serve --worker``'s page on the embedded AWS with the real
worker. A JPEG, a short MP4 and a broken file are dropped on the page; it hashes each (the
SHA-256 it shows is the file's), uploads it through its presigned URL, and shows ``ready``,
``ready`` and ``failed`` with the reason in words, live; the ``card`` shown has its listed
size; the video's progress went above 0 before ``ready``; a reload lists the same uploads.
All of it under the page's Content Security Policy: the browser's log holds no violation of
it, and an inline handler injected at the end is blocked (and logged).
A screenshot of the finished page is written to ``tests/media/build/artifacts/``."""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mediajobs.local.page import AppPage, page_for
from mediajobs.local.session import LocalSession
from tests.conftest import REPO, media_file

pytestmark = pytest.mark.subprocess

ARTIFACTS = REPO / "tests" / "media" / "build" / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
PHOTO, CLIP, BROKEN, TEXT = "orientation-landscape-6.jpg", "white.mp4", "corrupted.jpg", "SOURCES.md"
FILES = {
    PHOTO: media_file("photos", PHOTO),
    CLIP: media_file("video", CLIP),  # 10 s: split in 2 s segments, its progress climbs
    BROKEN: media_file("bad", BROKEN),
    TEXT: media_file("SOURCES.md"),  # no media at all: refused before anything is signed
}
#: How long the page may take to show every upload's end, seconds (a wait for a condition,
#: never a sleep: WebDriverWait returns as soon as it holds).
WAIT_S = 120


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[LocalSession, AppPage]]:
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.fail("the browser test needs Debian's chromium and chromium-driver: make test installs them (as root)")
    environ = {**os.environ, "SEGMENT_SECONDS": "2", "SPLIT_ABOVE_SECONDS": "0.001"}  # as make demo splits videos
    with LocalSession(
        log_level="WARNING", template_path=REPO / "template.yaml", name="mediajobs-page", environ=environ
    ) as session:
        from mediajobs.local.notifications import local_dispatcher

        stop = threading.Event()
        dispatcher = local_dispatcher(session.stack)

        def worker() -> None:  # serve --worker's loop: the queue polled, the outbox dispatched to the bus
            while not stop.is_set():
                session.esm.poll_once(wait_s=1)
                dispatcher.mapping.drain()

        thread = threading.Thread(target=worker, name="page-worker", daemon=True)
        with page_for(session.stack) as page:
            thread.start()
            try:
                yield session, page
            finally:
                stop.set()
                thread.join()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,1600"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console: CSP violations
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


DROP = """
const [paths, done] = [arguments[0], arguments[arguments.length - 1]];
const input = document.createElement('input');
input.type = 'file'; input.multiple = true; input.id = 'test-drop'; input.style.display = 'none';
document.body.append(input);
done(input.id);
"""

DISPATCH = """
const input = document.getElementById('test-drop');
const data = new DataTransfer();
for (const file of input.files) data.items.add(file);
const event = new DragEvent('drop', {dataTransfer: data, bubbles: true, cancelable: true});
document.getElementById('drop').dispatchEvent(event);
"""


def rows(driver) -> dict[str, dict]:
    """Each row's name -> what it shows (state, SHA-256, card size, max progress, failure)."""
    return driver.execute_script(
        """
        const out = {};
        for (const row of document.querySelectorAll('li.upload')) {
          const img = row.querySelector('.visual img');
          out[row.dataset.name] = {
            state: row.dataset.state || null, sha256: row.dataset.sha256 || null,
            maxProgress: Number(row.dataset.maxProgress || 0), why: row.querySelector('.why').textContent,
            img: img && img.complete
              ? [img.naturalWidth, img.naturalHeight, Number(img.dataset.width), Number(img.dataset.height)]
              : null,
            outputs: row.querySelectorAll('.outputs a').length,
          };
        }
        return out;
        """
    )


def policy_violations(entries: list[dict]) -> list[str]:
    """The browser log's messages that report a Content Security Policy violation."""
    return [e["message"] for e in entries if "Content Security Policy" in e["message"]]


def test_the_page_hashes_uploads_and_shows_each_upload_live_to_its_end_and_again_after_a_reload(served, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    session, page = served
    url = page.url
    browser.get(url)
    WebDriverWait(browser, 30).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
    input_id = browser.execute_async_script(DROP, [])
    browser.find_element(By.ID, input_id).send_keys("\n".join(str(p) for p in FILES.values()))
    browser.execute_script(DISPATCH)  # the files dropped on the drop zone, as a person drops them

    def ended(driver) -> dict | None:
        shown = rows(driver)
        if set(shown) != set(FILES) or any(v["state"] not in ("ready", "failed") for v in shown.values()):
            return None
        return shown if shown[PHOTO]["img"] else None

    shown = WebDriverWait(browser, WAIT_S, poll_frequency=0.5).until(ended)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "app-page.png"))
    assert {name: view["state"] for name, view in shown.items()} == {
        PHOTO: "ready",
        CLIP: "ready",
        BROKEN: "failed",
        TEXT: "failed",
    }
    assert shown[TEXT]["why"].startswith("this kind of file is not taken")
    for name, path in FILES.items():  # the page's own SHA-256 (Web Crypto) is the file's
        assert shown[name]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest(), name
    natural_w, natural_h, listed_w, listed_h = shown[PHOTO]["img"]
    assert (natural_w, natural_h) == (listed_w, listed_h) and listed_w > 0  # the card at its listed size
    assert shown[PHOTO]["outputs"] >= 3 and shown[CLIP]["outputs"] >= 2
    assert shown[CLIP]["maxProgress"] > 0  # processing was shown with its fraction before ready
    assert "damaged" in shown[BROKEN]["why"] or "cut short" in shown[BROKEN]["why"]
    # An upload asked for whose bytes never came (a closed tab): after a reload it says so.
    asked = browser.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        fetch('/api/uploads', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify({
          name: 'abandoned.jpg', content_type: 'image/jpeg', size_bytes: 10,
          sha256: btoa(String.fromCharCode(...new Uint8Array(32)))})}).then((r) => done(r.status));
        """
    )
    assert asked == 200
    # A reload lists the same uploads, from the server, in their states.
    browser.refresh()
    WebDriverWait(browser, 30).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))

    def listed(driver) -> dict | None:
        shown = rows(driver)
        return shown if set(shown) == {*FILES, "abandoned.jpg"} and all(v["state"] for v in shown.values()) else None

    again = WebDriverWait(browser, 30, poll_frequency=0.5).until(listed)
    assert {name: view["state"] for name, view in again.items()} == {
        **{name: view["state"] for name, view in shown.items()},
        "abandoned.jpg": "not-received",
    }
    assert (ARTIFACTS / "app-page.png").stat().st_size > 0
    assert page.notified > 0  # the stack's notifications (Asset Ready, Asset Failed) woke the stream
    # Keyboard: the first Tab reaches the file picker, and its label shows the focus.
    from selenium.webdriver.common.keys import Keys

    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    assert browser.switch_to.active_element.get_attribute("id") == "files"
    outline = browser.execute_script("return getComputedStyle(document.querySelector('.pick')).outlineStyle")
    assert outline == "solid"
    # Everything above ran under the page's policy, and broke none of it.
    assert policy_violations(browser.get_log("browser")) == []
    # The policy is enforced (and the log would tell): an injected inline handler does not run.
    injected = '<img src="/nothing-here" onerror="window.ran = 1">'  # a 404: its onerror would run
    browser.execute_script("document.body.insertAdjacentHTML('beforeend', arguments[0])", injected)
    blocked = WebDriverWait(browser, 30, poll_frequency=0.5).until(lambda d: policy_violations(d.get_log("browser")))
    assert "script-src" in blocked[0] and browser.execute_script("return window.ran") is None
    Path(ARTIFACTS / "app-page.txt").write_text(f"{url}\n")
