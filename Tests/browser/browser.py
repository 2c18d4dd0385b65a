"""Debian's Chromium, headless, through chromedriver: Cockpit's shell with the watchkeeper
page in its frame. Every wait has a deadline (a loaded 2-core machine is slow, never
wrong); nothing counts events in a time window."""

import time

from selenium import webdriver
from selenium.common.exceptions import (NoAlertPresentException, NoSuchElementException, StaleElementReferenceException,
                                        UnexpectedAlertPresentException, WebDriverException)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from harness import CHROMEDRIVER, CHROMIUM

FRAME = "iframe[name='cockpit1:localhost/watchkeeper']"


class Browser:
    def __init__(self, log_path, width=1400, height=1000):
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         f"--window-size={width},{height}", "--lang=en-US", "--force-device-scale-factor=1"]:
            options.add_argument(argument)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER, log_output=log_path), options=options)
        self.driver.set_script_timeout(30)
        self.width, self.height = width, height
        self.console = []

    def open(self, cockpit, timeout=60):
        """The shell at /watchkeeper, then into the page's frame once it has drawn."""
        self.driver.switch_to.default_content()
        self.driver.get(cockpit.url + "/watchkeeper")
        self.wait(timeout, lambda: self._enter_frame(), "the watchkeeper frame in the shell")

    def _enter_frame(self):
        self.driver.switch_to.default_content()
        try:
            frame = self.driver.find_element(By.CSS_SELECTOR, FRAME)
        except NoSuchElementException:
            return False
        self.driver.switch_to.frame(frame)
        return self.driver.execute_script("return document.readyState") == "complete"

    def wait(self, timeout, predicate, what):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                result = predicate()
                if result:
                    return result
            except (NoSuchElementException, StaleElementReferenceException) as error:
                last = error
            time.sleep(0.2)
        raise AssertionError(f"waited {timeout}s for {what}" + (f" ({last.__class__.__name__})" if last else ""))

    def find(self, css):
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def all(self, css):
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css):
        """The element's text now, or "" while there is none (or it was just redrawn)."""
        try:
            found = self.all(css)
            return found[0].text if found else ""
        except StaleElementReferenceException:
            return ""

    def wait_text(self, css, needle, timeout=30):
        seen = []

        def present():
            seen[:] = [self.text(css)]
            return needle in seen[0]
        try:
            return self.wait(timeout, present, f"{needle!r} in {css}")
        except AssertionError as error:
            raise AssertionError(f"{error}; it reads {seen[0] if seen else ''!r}") from None

    def click(self, css, timeout=30):
        """Clicks the element once it is there; the page may redraw around it meanwhile."""
        def attempt():
            self.find(css).click()
            return True
        self.wait(timeout, attempt, f"a clickable {css}")

    def script(self, source, *arguments):
        return self.driver.execute_script(source, *arguments)

    def call(self, method, parameters=None):
        """A Varlink call from inside the page, over its own Cockpit channel: what the socket
        answers this session (reply parameters, or {"error": name, "parameters": ...})."""
        return self.driver.execute_async_script("""
            const done = arguments[arguments.length - 1];
            window.watchkeeper.control.call(arguments[0], arguments[1] || {})
                .then(reply => done({ reply }))
                .catch(error => done({ error: error.name, parameters: error.parameters || null, message: String(error.message) }));
        """, method, parameters)

    def go(self, *path):
        self.script("cockpit.location.go(arguments[0])", list(path))

    def no_dialog(self):
        """True if no alert, confirm or prompt is open (one would have come from markup)."""
        try:
            self.driver.switch_to.alert
        except NoAlertPresentException:
            return True
        except UnexpectedAlertPresentException:
            return False
        return False

    def screenshot(self, path):
        """The whole page: the viewport grown to the frame's content (Chromium's device
        metrics, which a headless window's size does not always follow), then back."""
        # PatternFly's page scrolls in its main element, not in the document.
        height = int(self.script("const main = document.querySelector('.pf-c-page__main');"
                                 "return Math.max(document.documentElement.scrollHeight, main ? main.scrollHeight : 0)")) + 70
        height = max(self.height, min(height, 3000))
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                    {"width": self.width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        try:
            self.wait(10, lambda: self.script("return window.innerHeight") >= height - 120, "the frame to grow")
            time.sleep(0.3)
            self.driver.switch_to.default_content()
            self.driver.save_screenshot(path)
        finally:
            self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
            self._enter_frame()

    def errors(self):
        """SEVERE console entries from the watchkeeper package (the shell's own, such as a
        missing D-Bus, are Cockpit's business)."""
        try:
            self.console += self.driver.get_log("browser")
        except WebDriverException:
            pass
        return [entry["message"] for entry in self.console if entry["level"] == "SEVERE" and "/watchkeeper/" in entry["message"]]

    def close(self):
        try:
            self.driver.quit()
        except WebDriverException:
            pass
