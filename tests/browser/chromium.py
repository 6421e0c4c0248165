"""The system's headless Chromium driven by the system's chromedriver, for the browser tests and
bench/compliance_screenshots.py. Selenium Manager is never used (explicit browser and driver paths;
the caller sets SE_OFFLINE): nothing is fetched."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def not_installed() -> list[str]:
    """The paths of the browser and the driver that are missing (Debian's chromium, chromium-driver)."""
    return [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]


def start_chromium(profile: Path, flags: Iterable[str], page_load_timeout_s: float) -> WebDriver:
    """Chromium with `flags` and its own profile directory, each page given `page_load_timeout_s` to load."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in flags:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(page_load_timeout_s)
    return driver
