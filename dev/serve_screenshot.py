"""Take docs/serve.png, the picture of `fitcheck serve`'s page that README.md and docs/serve.md show.

    python dev/serve_screenshot.py [OUT.png]

It starts the server in this process on a free loopback port with an empty user config folder, opens the page
for a request that does not fit (so the picture has the verdict, the bars, the curve and the alternatives) in
Debian's headless chromium (`apt-get install chromium chromium-driver`; selenium comes with the test extra), waits
for the answer and saves the window.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path

QUERY = "model=qwen-7b&profile=rtx-3060&context=16384"
WINDOW = (1280, 1400)   # CSS pixels: the verdict, the bars, the facts, the curve and the first alternatives


def main(out: str = "docs/serve.png") -> int:
    with tempfile.TemporaryDirectory() as home:
        os.environ.update(XDG_CONFIG_HOME=f"{home}/config", XDG_CACHE_HOME=f"{home}/cache", FITCHECK_NO_BENCH="1")
        from selenium import webdriver
        from selenium.webdriver.support.ui import WebDriverWait

        from fitcheck.serve.server import make_server

        server = make_server("127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                     "--disable-background-networking", "--disable-component-update", "--disable-sync",
                     "--hide-scrollbars", f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--user-data-dir={home}/chromium"):
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options,
                                  service=webdriver.ChromeService(executable_path="/usr/bin/chromedriver"))
        try:
            driver.get(f"http://127.0.0.1:{server.port}/?{QUERY}")
            WebDriverWait(driver, 30).until(lambda d: d.execute_script(
                "return document.getElementById('verdict').textContent !== ''"
                " && document.getElementById('plot-img').complete"
                " && document.getElementById('plot-img').naturalWidth > 0"
                " && document.querySelectorAll('#alternatives li').length > 0"))
            driver.execute_script("document.activeElement.blur()")
            Path(out).write_bytes(driver.get_screenshot_as_png())
        finally:
            driver.quit()
            server.shutdown()
            server.server_close()
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
