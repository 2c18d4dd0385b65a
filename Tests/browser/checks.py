"""What the page must do, one check each, in order (later checks use the runs earlier ones
made). Everything is waited for with a deadline."""

import json
import os
import time

from browser import Browser
import harness

HOSTILE = "<img src=x onerror=alert(1)>"
NOBODY = (65534, 65534)   # in nogroup: the daemon's read_group
STRANGER = (1, 1)         # Debian's `daemon` user: in no group the socket admits


class World:
    def __init__(self, root, alpha, bravo, share, config, shots, things):
        self.root, self.alpha, self.bravo, self.share, self.config, self.shots = root, alpha, bravo, share, config, shots
        self.things = things
        self.browsers = []
        self.admin = self.session("admin", None)
        self.run_id = None

    def session(self, name, user):
        """A cockpit-ws of its own for a browser of its own, as `user` (None: root)."""
        cockpit = harness.Cockpit(self.root, name, self.share, self.config, user)
        self.things.append(cockpit)
        browser = Browser(f"{self.root}/chromedriver-{name}.log")
        self.browsers.append(browser)
        browser.open(cockpit)
        return browser

    def shot(self, browser, name):
        browser.screenshot(os.path.join(self.shots, f"cockpit-{name}.png"))

    def save_failure(self, name):
        for index, browser in enumerate(self.browsers):
            try:
                browser.screenshot(os.path.join(self.root, f"failed-{name}-{index}.png"))
            except Exception:
                pass

    def console_errors(self):
        return [error for browser in self.browsers for error in browser.errors()]

    def history(self, host, name):
        return json.loads(host.cli("history", name, "--json", "-n", "50"))["runs"]

    def close(self):
        for browser in self.browsers:
            browser.close()


def check_overview_lists_tasks_and_watches(world):
    page = world.admin
    for task in ["report", "stuck", "heartbeat", "spring-forward", "fleet-report"]:
        page.wait(30, lambda: page.all(f"#tasks tr[data-key='{task}']"), f"task {task} listed")
    page.wait_text("#watches tr[data-key='inbox']", "inotify")
    page.wait_text("#daemon-state", "running")
    page.wait_text("#config-generation", "generation 1")
    page.wait_text("#cluster-member", "alpha")
    page.wait_text("#tasks tr[data-key='spring-forward']", "CET")
    assert page.all("#tasks tr[data-key='report'] button[data-action='trigger']"), "an administrator may run it"
    # Next's fires on its page, with the mark of the night Berlin skips 02:00-03:00.
    page.go("task", "spring-forward")
    page.wait_text("#next-fires", "moved")
    page.wait_text("#next-fires", "CEST")


def check_triggered_task_runs_with_progress_then_shows_in_the_timeline(world):
    page = world.admin
    page.go()
    page.click("button[data-action='trigger'][data-task='report']")
    row = "#running-jobs tr[data-key]"
    page.wait(30, lambda: "report" in page.text(row), "report among the running jobs")
    world.run_id = page.wait(10, lambda: page.find(row).get_attribute("data-key"), "its run ID")
    page.wait(30, lambda: int(page.find(f"{row} .wk-bar--progress").get_attribute("aria-valuenow")) >= 40, "its progress bar moving")
    page.wait_text(row, "writing part")
    assert page.all(f"{row} .wk-bar--budget .wk-bar__mark"), "the budget bar marks where it warns"
    world.shot(page, "overview")
    # Its page while it runs: the record is the running job, the output grows.
    page.click(f".wk-notifications a[href*='{world.run_id}']")
    page.wait_text("#run-record", "running")
    page.wait_text("#run-output", "line 1")
    # Then the record, and the output complete with the record's line.
    page.wait_text("#run-outcome", "ok", timeout=60)
    page.wait_text("#run-output", "ended: ok", timeout=60)
    world.shot(page, "run")
    page.go("task", "report")
    page.wait(30, lambda: page.all(f"#timeline rect[data-run='{world.run_id}'][data-outcome='ok']"), "the run in the timeline, ok")
    page.wait(30, lambda: page.all(f"#runs tr[data-key^='{world.run_id}']"), "the run in the table")
    assert page.all("#timeline .wk-budget-line"), "the budget's line"
    world.shot(page, "task")


def check_output_with_escape_sequences_is_text(world):
    page = world.admin
    page.go("task", "report", "run", world.run_id)
    page.wait_text("#run-output", "line 6")
    text = page.text("#run-output")
    assert "line 3 \\x1b[31mred\\x1b[0m <b>bold</b>" in text, text
    assert "\x1b" not in text, "no raw escape reaches the page"
    assert not page.all("#run-output b"), "<b> stayed text"


def check_cancel_stops_a_running_job(world):
    page = world.admin
    page.go()
    page.click("button[data-action='trigger'][data-task='stuck']")
    page.wait(30, lambda: "stuck" in page.text("#running-jobs"), "stuck running")
    run_id = page.wait(10, lambda: next((row.get_attribute("data-key") for row in page.all("#running-jobs tr[data-key]")
                                         if "stuck" in row.text), None), "stuck's run ID")
    page.click(f"button[data-action='cancel'][data-run='{run_id}']")
    page.wait(40, lambda: not page.all(f"#running-jobs tr[data-key='{run_id}']"), "stuck gone from the running jobs")
    page.wait_text(".wk-notifications", "expiring")
    runs = [run for run in world.history(world.alpha, "stuck") if run.get("run_id") == run_id]
    assert runs and runs[0]["outcome"] == "expired", runs


def check_refused_reload_shows_line_and_column(world):
    page = world.admin
    page.go()
    good = open(world.alpha.conf).read()
    bad = good.replace('budget = "2m"', 'budget = "soon"')
    line = bad.splitlines().index('budget = "soon"') + 1
    world.alpha.write_config(bad)
    try:
        page.click("button[data-action='reload']")
        page.wait_text("#reload-errors", f"{world.alpha.conf}:{line}:10:")
        page.wait_text("#last-reload-errors", f":{line}:10:")
        world.shot(page, "reload-refused")
    finally:
        world.alpha.write_config(good)
    page.click("button[data-action='reload']")
    page.wait_text(".wk-notifications", "Reloaded: configuration generation 2")


def check_dump_shows_the_state_dump(world):
    page = world.admin
    page.go()
    page.click("button[data-action='dump']")
    page.wait_text("#dump-text", "watchkeeper state dump")
    assert "report" in page.text("#dump-text"), page.text("#dump-text")[:400]


def check_hostile_file_name_renders_as_text(world):
    page = world.admin
    with open(os.path.join(world.root, "inbox", HOSTILE), "w") as hostile:
        hostile.write("x\n")
    page.go("watch", "inbox")
    page.wait_text("#runs", HOSTILE, timeout=60)
    assert not page.all("img"), "no element came from the file name"
    assert page.no_dialog(), "no dialog opened"
    run_id = page.wait(10, lambda: page.find("#runs tr[data-key] a").text, "the file's run ID")
    page.wait(10, lambda: page.all("#timeline rect[data-outcome='ok']"), "the file's run in the timeline")
    world.shot(page, "watch")
    page.go("watch", "inbox", "run", run_id)
    page.wait_text("#run-output", "got ")
    page.wait_text("#run-output", HOSTILE)
    assert not page.all("img") and page.no_dialog()


def check_fleet_view_lists_a_fire_run_on_another_host(world):
    page = world.admin
    world.bravo.cli("trigger", "fleet-report", "--fleet")
    page.go()
    page.click("button[data-action='trigger-fleet'][data-task='fleet-report']")
    page.wait_text(".wk-notifications", "through the fleet")
    page.click("#cluster a")
    page.wait(60, lambda: any("alpha" in row.text for row in page.all("#fleet-fires tr[data-key]")), "alpha's own fire, run through the fleet")
    page.wait(60, lambda: any("bravo" in row.text for row in page.all("#fleet-fires tr[data-key]")), "bravo's fire listed")
    page.wait(60, lambda: any("bravo" in row.text and "ok" in row.text for row in page.all("#fleet-fires tr[data-key]")),
              "bravo's fire done, ok")
    page.wait_text("#members", "alpha")
    page.wait_text("#members", "bravo")
    page.wait_text("#members tr[data-key='alpha']", "held")
    assert "No fire is held" in page.text("#held-fires"), page.text("#held-fires")
    world.shot(page, "fleet")


def check_read_only_session_has_no_buttons_and_the_socket_refuses_it(world):
    page = world.session("reader", NOBODY)
    # The shell reloads the frame once it knows the session has no administrative access:
    # the next fires drawn are those of the page that stays.
    page.wait_text("#tasks tr[data-key='heartbeat']", "UTC", timeout=60)
    page.wait_text("#read-only-notice", "Read-only")
    page.wait_text("#read-only-notice", "administrative access")
    buttons = page.script("return Array.from(document.querySelectorAll('#content button, #access button')).map(b => b.textContent)")
    assert buttons == [], buttons
    refused = page.call("io.watchkeeper.Control.Trigger", {"task": "report"})
    assert refused.get("error") == "io.watchkeeper.Control.PermissionDenied", refused
    assert refused["parameters"]["method"] == "Trigger", refused
    status = page.call("io.watchkeeper.Control.Status")
    assert status["reply"]["access"]["level"] == "read", status.get("reply", {}).get("access")
    world.shot(page, "read-only")


def check_a_user_in_neither_group_is_refused(world):
    page = world.session("stranger", STRANGER)
    page.wait_text("#refused", "may not use", timeout=60)
    assert not page.all("#content button")


def check_timeline_colours_runs_by_outcome_against_the_budget(world):
    page = world.admin
    page.go("task", "sampler")
    for outcome in ["ok", "failed", "expired"]:
        page.wait(60, lambda: page.all(f"#timeline rect[data-outcome='{outcome}']"), f"a {outcome} run in sampler's timeline")
    page.wait_text("#timeline .wk-legend", "expired")
    world.shot(page, "timeline")


CHECKS = [(name[len("check_"):].replace("_", " "), function) for name, function in list(globals().items())
          if name.startswith("check_") and callable(function)]
