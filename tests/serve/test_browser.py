"""The page of `fitcheck serve` in a real browser (Debian's chromium, driven headless through chromedriver): it loads
offline, builds its controls from /api/options, answers as the API answers while a control moves, takes an
alternative, round-trips its state through the URL, shows the where and models --fits views, and is usable at
phone width and from the keyboard. `.ci/run` installs chromium and chromium-driver and requires them; elsewhere, without them, these tests skip."""

from __future__ import annotations

import os
import shutil
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest

from tests.serve.client import get

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
WAIT_S = 20
NOT_ON_THE_PAGE = {"require"}   # a CI gate, not a what-if: the page has no control for it
PAGE_KEYS = {"view", "against"}  # the page's own, not the API's

REQUIRED = os.environ.get("FITCHECK_BROWSER_TESTS") == "required"   # .ci/run: a missing browser fails, not skips
if not (os.access(CHROMIUM, os.X_OK) and os.access(DRIVER, os.X_OK)):
    if REQUIRED:
        raise RuntimeError(f"FITCHECK_BROWSER_TESTS=required, but {CHROMIUM} or {DRIVER} is missing")
    pytest.skip("chromium and chromedriver are not installed (.ci/run installs them)", allow_module_level=True)
from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-quic", "--window-size=1280,1000",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


class Page:
    """The page at one URL, with the waits a test needs (the answer comes after a debounce and a request)."""

    def __init__(self, driver, server, query: str = ""):
        self.d, self.server = driver, server
        self.origin = f"http://127.0.0.1:{server.port}"
        driver.get(f"{self.origin}/{'?' + query if query else ''}")
        self.wait(lambda d: d.execute_script("return document.querySelectorAll('#controls .field').length") > 0)

    def wait(self, until, message: str = ""):
        return WebDriverWait(self.d, WAIT_S, poll_frequency=0.05,
                             ignored_exceptions=(StaleElementReferenceException,)).until(until, message)

    def by(self, css: str):
        return self.d.find_element(By.CSS_SELECTOR, css)

    def all(self, css: str):
        return self.d.find_elements(By.CSS_SELECTOR, css)

    def settled(self) -> dict:
        """Wait until the answer is the one for the current controls; the API's document for them."""
        self.wait(lambda d: d.execute_script(
            "return document.getElementById('answer').getAttribute('aria-busy') === 'false'"
            " && !document.getElementById('verdict').closest('[hidden]')"
            " && document.getElementById('verdict').textContent !== ''"), "no verdict")
        doc = self.api("check")
        self.wait(lambda d: self.by("#verdict").get_attribute("data-status") == doc["verdict"]["status"]
                  and self.verdict_line() == doc["verdict"]["summary"].split(": ", 1)[-1], "the verdict is stale")
        return doc

    def query(self) -> list[tuple[str, str]]:
        return parse_qsl(urlsplit(self.d.current_url).query, keep_blank_values=True)

    def api(self, view: str = "check", having: str = "") -> dict:
        """What the API answers for the page's state: a check for the page's URL less the page's own keys (the URL
        is the API's query), another view for the last request the page made to it."""
        if view == "check":
            ask = urlencode([(k, v) for k, v in self.query() if k not in PAGE_KEYS])
        else:
            def asked(d):
                names = d.execute_script("return performance.getEntriesByType('resource').map((r) => r.name)"
                                         f".filter((n) => n.includes('/api/{view}?'))")
                return names and having in names[-1] and names[-1]

            ask = urlsplit(self.wait(asked, f"the page asked no /api/{view} with {having!r}")).query
        reply = get(self.server, f"/api/{view}?{ask}")
        assert reply.status == 200, reply.body
        return reply.json

    def texts(self, css: str) -> list[str]:
        """The shown text of each match, read at once (the answer is drawn anew as it changes)."""
        return self.d.execute_script(f"return [...document.querySelectorAll({css!r})].map((e) => e.innerText)")

    def verdict_line(self) -> str:
        return self.texts("#verdict span")[0]

    def bar_labels(self) -> list[str]:
        return self.texts("#bars .bar-label")


def gib(b) -> str:
    return f"{b / 2**30:.2f} GiB"


def severe_logs(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_the_controls_are_the_option_vocabulary(browser, server):
    page = Page(browser, server)
    options = get(server, "/api/options").json
    takes = set(options["endpoints"]["/api/check"]["params"]) - NOT_ON_THE_PAGE
    named = {e.get_attribute("name") for e in page.all("#form [name]")}
    assert takes <= named, takes - named
    for o in options["options"]:       # each choice list is the vocabulary's
        if o["type"] == "choice" and o["param"] in named and o["param"] not in ("profile", "mode"):
            shown = [e.get_attribute("value") for e in page.all(f"#opt-{o['param']} option")]
            assert [v for v in shown if v] == [str(c) for c in o["choices"]], o["param"]
    profiles = {e.get_attribute("value") for e in page.all("#profile option")} - {""}
    assert profiles == {p["name"] for p in options["profiles"]}
    modes = [b.get_attribute("data-mode") for b in page.all("#modes button")]
    assert modes == options["modes"]
    assert page.by("#hint").is_displayed()
    assert severe_logs(browser) == []


def test_choose_a_model_and_a_profile_and_read_the_answer(browser, server):
    page = Page(browser, server)
    box = page.by("#model")
    box.send_keys("qwen-7b", Keys.ENTER)
    Select(page.by("#profile")).select_by_value("rtx-4090")
    doc = page.settled()
    assert ("model", "qwen-7b") in page.query() and ("profile", "rtx-4090") in page.query()
    assert doc["verdict"]["status"] == "fits"
    assert page.texts("#verdict strong")[0] == "FITS"
    free = {d["device"]: d["free_bytes"] for d in doc["verdict"]["devices"]}
    dev = doc["estimate"]["devices"][0]
    assert page.bar_labels()[0] == f"GPU0 needs {gib(dev['total_bytes'])} of {gib(free['gpu0'])} free"
    legend = page.texts("#bars .bar-row .legend li")
    shown = {name: b for name, b in dev["components"].items() if b > 0}
    assert legend[:len(shown)] == [f"{name} {gib(b)}" for name, b in shown.items()]
    widths = page.d.execute_script(
        "return [...document.querySelectorAll('#bars .seg')].map((s) => parseFloat(s.style.width))")
    scale = max(dev["total_bytes"], free["gpu0"])
    assert widths == pytest.approx([100 * b / scale for b in shown.values()], abs=0.01)
    facts = dict(zip(page.texts("#facts dt"), page.texts("#facts dd"), strict=True))
    assert facts["Largest that fits"].startswith(f"context {doc['verdict']['max_context']:,} tokens")
    assert "tok/s decode" in facts["Speed"] and facts["Download"].startswith(gib(doc["download"]["download_bytes"]))
    page.wait(lambda d: page.by("#plot").is_displayed(), "no memory-against-context plot")
    assert page.d.execute_script("return document.getElementById('plot-img').naturalWidth") > 0
    assert severe_logs(browser) == []


def test_moving_the_context_slider_answers_again(browser, server):
    page = Page(browser, server, "model=qwen-7b&profile=rtx-3060&context=4096&strict=1")
    before = page.settled()
    slider = page.by('[data-param="context"] input[type=range]')
    slider.send_keys(Keys.ARROW_RIGHT, Keys.ARROW_RIGHT)          # the keyboard: a power of two a step
    page.wait(lambda d: ("context", "16384") in page.query(), "the URL did not follow the slider")
    assert page.by("#opt-context").get_attribute("value") == "16384"
    after = page.settled()
    assert after["request"]["context"] == 16384
    assert after["estimate"]["devices"][0]["total_bytes"] > before["estimate"]["devices"][0]["total_bytes"]
    assert after["verdict"]["status"] == "does_not_fit" and page.texts("#verdict strong")[0] == "DOES NOT FIT"
    over = after["estimate"]["devices"][0]["total_bytes"] - after["verdict"]["devices"][0]["free_bytes"]
    assert page.bar_labels()[0].endswith(f", over by {gib(over)}")


def test_take_an_alternative(browser, server):
    page = Page(browser, server, "model=qwen-7b&profile=rtx-3060&context=16384&strict=1")
    doc = page.settled()
    alternatives = doc["alternatives"]
    assert alternatives and len(page.all("#alternatives li.alt")) == len(alternatives)
    shown = page.texts("#alternatives li.alt code")
    want = [c for a in alternatives for c in (a["fitcheck_command"], a["engine_command"]) if c]
    assert shown == want
    i = next(i for i, a in enumerate(alternatives) if a["status"] == "fits")
    take = alternatives[i]
    page.all("#alternatives li.alt")[i].find_element(By.CSS_SELECTOR, "button.take").click()
    taken = page.settled()
    assert taken["verdict"]["status"] == take["status"]
    assert taken["estimate"]["devices"][0]["total_bytes"] == take["total_bytes"]
    query = dict(page.query())
    for name, value in take["changes"].items():
        assert query[name.replace("_", "-")] == str(value), name
    # and the alternative's own fitcheck command says the same (its bytes were checked by the CLI tests)
    assert taken["request"]["precision"] == take["changes"]["precision"]


def test_copy_puts_the_command_on_the_clipboard(browser, server):
    page = Page(browser, server, "model=qwen-7b&profile=rtx-3060&context=16384&strict=1")
    page.settled()
    button = page.by("#alternatives .cmd button.copy")
    button.click()
    page.wait(lambda d: button.text == "Copied", "the copy button did not say so")


def test_weights_left_to_fitcheck_say_what_was_chosen(browser, server):
    page = Page(browser, server, "model=qwen-7b&profile=rtx-3060&context=16384")
    doc = page.settled()
    assert doc["chosen"] and doc["verdict"]["status"] in ("fits", "tight")
    chosen = page.texts("#chosen")[0]
    assert chosen.startswith(f"Chosen: {doc['request']['precision']} with {doc['request']['engine']}, the best that")
    assert f"the default, {doc['chosen']['default']['precision']} with" in chosen


def test_the_url_round_trips(browser, server):
    query = ("model=llama3-8b&profile=rtx-4090&mode=lora&seq-len=4096&batch=4&grad-checkpointing=1"
             "&lora-rank=32&against=batch")
    page = Page(browser, server, query)
    doc = page.settled()
    assert sorted(page.query()) == sorted(parse_qsl(query))      # the page writes back what it read
    assert doc["request"]["mode"] == "lora" and doc["request"]["seq_len"] == 4096 and doc["request"]["batch"] == 4
    assert page.by('[data-mode="lora"]').get_attribute("aria-pressed") == "true"
    assert page.by("#opt-lora-rank").get_attribute("value") == "32"
    assert page.by("#more").get_attribute("open") is not None     # a set option of 'More options' is shown
    assert not page.by('[data-param="context"]').is_displayed()   # inference's, not LoRA's
    text, bars = page.verdict_line(), page.bar_labels()
    page.by('[data-mode="qlora"]').click()
    page.wait(lambda d: ("mode", "qlora") in page.query())
    assert page.settled()["request"]["mode"] == "qlora"
    browser.back()                                                 # replaceState: back leaves the page
    page = Page(browser, server, query)                             # the same URL reloaded: the same answer
    page.settled()
    assert (page.verdict_line(), page.bar_labels()) == (text, bars)


def test_the_where_view(browser, server):
    page = Page(browser, server, "model=qwen-7b&context=8192")
    page.settled()
    page.by('[data-view="where"]').click()
    page.wait(lambda d: ("view", "where") in page.query())
    Select(page.by("#where-kind")).select_by_value("desktop")
    page.wait(lambda d: ("kind", "desktop") in page.query())
    doc = page.api("where", having="kind=desktop")
    page.wait(lambda d: len(page.all("#where-view tbody tr")) == len(doc["machines"]) > 0, "no where table")
    first = page.all("#where-view tbody tr")[0].find_elements(By.TAG_NAME, "td")
    assert first[0].text == doc["machines"][0]["name"] and first[1].text == "desktop"
    assert not page.by("fieldset.machine").is_displayed()           # where ranks machines: no machine picker
    link = first[0].find_element(By.TAG_NAME, "a").get_attribute("href")
    assert dict(parse_qsl(urlsplit(link).query))["profile"] == doc["machines"][0]["name"]


def test_the_fits_view(browser, server):
    page = Page(browser, server, "view=fits&profile=rtx-3060&top=5&sort=speed")
    assert page.by("#fits-sort").get_attribute("value") == "speed"
    doc = page.api("fits")
    assert doc["ranking"]["sort"] == "speed"
    page.wait(lambda d: len(page.all("#fits-view tbody tr")) == len(doc["models"]) == 5, "no fits table")
    ids = page.texts("#fits-view tbody tr td:first-child")
    assert ids == [m["id"] for m in doc["models"]]
    assert not page.by("#model").is_displayed()


def test_phone_width_has_no_sideways_scroll(browser, server):
    browser.set_window_size(390, 844)
    try:
        for query in ("model=qwen-7b&profile=rtx-3060&context=16384&strict=1", "view=where&model=qwen-7b",
                      "view=fits&profile=rtx-4090"):
            page = Page(browser, server, query)
            page.wait(lambda d: d.execute_script("return document.getElementById('answer').getAttribute("
                                                 "'aria-busy') === 'false' && !document.getElementById('hint').offsetParent"))
            wide = browser.execute_script("return document.documentElement.scrollWidth")
            assert wide <= browser.execute_script("return window.innerWidth"), query
    finally:
        browser.set_window_size(1280, 1000)


def test_the_page_loads_nothing_from_elsewhere(browser, server):
    page = Page(browser, server, "model=qwen-7b&profile=rtx-4090")
    page.settled()
    names = browser.execute_script("return performance.getEntriesByType('resource').map((r) => r.name)")
    assert names and all(n.startswith(page.origin + "/") for n in names), names
    assert get(server, "/").headers["content-security-policy"].startswith("default-src 'self'")


def test_bad_input_says_the_clis_line(browser, server):
    page = Page(browser, server, "model=qwen-7b&profile=rtx-4090&context=-5")
    error = page.by("#error")
    page.wait(lambda d: error.is_displayed(), "no error line")
    want = get(server, "/api/check", {"model": "qwen-7b", "profile": "rtx-4090", "context": "-5"}).json["error"]
    assert error.text == want
