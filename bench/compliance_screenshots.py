"""Screenshots of the compliance pages over a realistic trail: the compliance benchmark's year of
traffic (bench/compliance_bench.py: three tenants, policy revisions, denials, masking, merges of
nothing, usage reports) seeded into a fresh store, a real `gateway serve` on it, and the system's
headless Chromium signed in as an auditor of `acme`.

    .venv/bin/python bench/compliance_screenshots.py --out docs/images          # 60,000 rows (~1 min)

It writes overview-30d.png (the 30-day overview), overview-year.png (the year, with the policy
revisions marked), traces-denied.png (the trace list a denial bar links to) and subject.png (the
report on the tenant's most-mentioned customer). Needs /usr/bin/chromium and /usr/bin/chromedriver
(Debian's chromium and chromium-driver; ./scripts/test installs them as root). Nothing is fetched:
Selenium Manager is off (explicit paths, SE_OFFLINE).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

from compliance_bench import TENANT, pick_subjects, seed
from harness import Server, create_key, free_port
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.browser.chromium, when run as a script

from core.store import migrate_store, open_store  # noqa: E402
from tests.browser.chromium import not_installed, start_chromium  # noqa: E402

FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--window-size=1280,2000",
)


def browser(profile: Path) -> WebDriver:
    os.environ["SE_OFFLINE"] = "true"
    return start_chromium(profile, FLAGS, 60)


def shoot(driver: WebDriver, url: str, wait_id: str, path: Path) -> None:
    driver.get(url)
    WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.ID, wait_id))
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(1280, max(800, min(height, 2400)))  # a long report is cut at 2,400 px
    if not driver.save_screenshot(str(path)):
        raise SystemExit(f"could not save {path}")
    print(f"  {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the directory the screenshots go to")
    parser.add_argument("--rows", type=int, default=60_000, help="audit rows to seed over the year (all tenants)")
    args = parser.parse_args(argv)
    missing = not_installed()
    if missing:
        print(f"{' and '.join(missing)} not installed: install Debian's chromium and chromium-driver", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="gw-screens-"))
    server: Server | None = None
    driver: WebDriver | None = None
    try:
        url = f"sqlite:///{root / 'gateway.db'}"
        migrate_store(url)
        engine = open_store(url)
        print(f"seeding {args.rows:,} audit rows", flush=True)
        world, _ = seed(engine, args.rows, datetime.now(timezone.utc))
        engine.dispose()
        hottest = pick_subjects(world)["hottest"]
        server = Server(root, free_port(), label="screens")
        server.start()
        server.wait_ready()
        key = create_key(root, TENANT, "user:auditor", "auditor")
        driver = browser(root / "chromium-profile")
        driver.get(server.url + "/audit")
        WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.ID, "key"))
        driver.find_element(By.ID, "key").send_keys(key)
        driver.find_element(By.ID, "sign-in").click()
        WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.ID, "filters"))
        shoot(driver, server.url + "/audit/overview?period=30d", "calls-chart", args.out / "overview-30d.png")
        shoot(driver, server.url + "/audit/overview?since=" + quote(_year_ago()), "calls-chart", args.out / "overview-year.png")
        driver.get(server.url + "/audit/overview?period=30d")
        WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.ID, "calls-chart"))
        bar = driver.find_element(By.CSS_SELECTOR, '#calls-chart rect.segment[data-outcome="deny"]')
        link = bar.find_element(By.XPATH, "..").get_dom_attribute("href") or "/audit"
        shoot(driver, server.url + link, "filters", args.out / "traces-denied.png")
        shoot(driver, server.url + "/audit/subjects/" + quote(hottest), "subject-calls", args.out / "subject.png")
        return 0
    finally:
        if driver is not None:
            driver.quit()
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _year_ago() -> str:
    now = datetime.now(timezone.utc).replace(microsecond=0)
    return now.replace(year=now.year - 1).isoformat().replace("+00:00", "Z")


if __name__ == "__main__":
    sys.exit(main())
