#!/usr/bin/env python3
"""Loads a report's index.html in headless Chromium and checks it as a reader would see it.

Usage: check_report_html.py DIR/index.html
Passes (exit 0) when every <img> loaded (complete, naturalWidth > 0), the console logged no error,
no script threw (sorting the cell table by a click included), and nothing was requested from the
network. Talks to Chromium over the DevTools protocol on a pipe (--remote-debugging-pipe: fd 3 in,
fd 4 out, messages separated by NUL), so it needs only the Debian package `chromium` and the
Python standard library. Exit 1 on failure, with the reason, also when Chromium is missing.
"""
import fcntl
import json
import os
import pathlib
import select
import shutil
import subprocess
import sys
import tempfile
import time

BROWSERS = ("chromium", "chromium-browser")
DEADLINE_S = 60
# After the load event, console messages from late work still arrive; wait this long for them.
SETTLE_S = 0.5

IMAGES = """JSON.stringify(Array.from(document.images).map(function (i) {
  return {src: i.getAttribute("src"), complete: i.complete, width: i.naturalWidth};
}))"""
SORT_TWICE = """(function () {
  var th = document.querySelectorAll("table.sortable th");
  if (th.length === 0) { return "no sortable table"; }
  th[th.length - 1].click(); th[0].click(); th[0].click();
  return th[0].getAttribute("aria-sort");
})()"""


class DevTools:
    """A headless Chromium driven over its DevTools pipe."""

    def __init__(self, binary, profile_dir):
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()
        # Above any descriptor the child could already use, so dup2 onto 3 and 4 cannot clobber them.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in (to_browser_r, from_browser_w)]
        for fd in (to_browser_r, from_browser_w):
            os.close(fd)

        def onto_3_and_4():
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self.process = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--disable-extensions", "--remote-debugging-pipe", f"--user-data-dir={profile_dir}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=onto_3_and_4, pass_fds=(3, 4))
        for fd in high:
            os.close(fd)
        self.out = to_browser_w
        self.inp = from_browser_r
        self.buffer = b""
        self.next_id = 0
        self.events = []

    def send(self, method, params=None, session=None):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.out, json.dumps(message).encode() + b"\0")
        while True:
            reply = self.receive()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def receive(self, timeout=None):
        """The next message, or None after `timeout` seconds without one."""
        end = time.monotonic() + (timeout if timeout is not None else DEADLINE_S)
        while b"\0" not in self.buffer:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.inp], [], [], left)[0]:
                if timeout is not None:
                    return None
                raise TimeoutError("Chromium did not answer within %d s" % DEADLINE_S)
            chunk = os.read(self.inp, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe: "
                                   + self.process.stderr.read().decode(errors="replace")[-2000:])
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def wait_for(self, method, session):
        for event in self.events:
            if event.get("method") == method and event.get("sessionId") == session:
                return
        while True:
            event = self.receive()
            self.events.append(event)
            if event.get("method") == method and event.get("sessionId") == session:
                return

    def drain(self, seconds):
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            event = self.receive(timeout=left)
            if event is None:
                return
            self.events.append(event)

    def close(self):
        try:
            self.send("Browser.close")
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self.out)
        os.close(self.inp)


def evaluate(browser, session, expression):
    result = browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session)
    if "exceptionDetails" in result:
        raise RuntimeError(f"script failed: {result['exceptionDetails']}")
    return result["result"].get("value")


def problems_in(events):
    """Console errors, uncaught exceptions and network requests among the recorded events."""
    found = []
    for e in events:
        method, params = e.get("method"), e.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            found.append("console error: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            found.append("uncaught exception: " + json.dumps(params["exceptionDetails"])[:500])
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            found.append(f"console error: {params['entry'].get('text')} ({params['entry'].get('url', '')})")
        elif method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            if not url.startswith(("file:", "data:", "about:")):
                found.append(f"network request: {url}")
    return found


def check(page):
    binary = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if binary is None:
        return ["Chromium was not found (looked for " + ", ".join(BROWSERS) + " on PATH): the report's HTML check "
                "needs it. Install the Debian package chromium (scripts/install-deps.sh does)."]
    with tempfile.TemporaryDirectory(prefix="sweetspot-chromium-") as profile:
        browser = DevTools(binary, profile)
        try:
            target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Runtime", "Log", "Page", "Network"):
                browser.send(f"{domain}.enable", session=session)
            browser.send("Page.navigate", {"url": page.resolve().as_uri()}, session)
            browser.wait_for("Page.loadEventFired", session)
            browser.drain(SETTLE_S)
            images = json.loads(evaluate(browser, session, IMAGES))
            sorted_as = evaluate(browser, session, SORT_TWICE)
            browser.drain(SETTLE_S)
        finally:
            browser.close()
    found = problems_in(browser.events)
    if not images:
        found.append("the page has no images")
    found += [f"image did not load: {i['src']}" for i in images if not i["complete"] or i["width"] <= 0]
    if sorted_as != "descending":
        found.append(f"clicking a heading twice did not sort descending (aria-sort: {sorted_as})")
    print(f"check_report_html: {page}: {len(images)} images, "
          f"{sum(1 for i in images if i['complete'] and i['width'] > 0)} loaded")
    return found


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    page = pathlib.Path(sys.argv[1])
    if not page.is_file():
        print(f"check_report_html: no such page: {page}", file=sys.stderr)
        return 1
    found = check(page)
    for p in found:
        print(f"check_report_html: FAIL: {p}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
