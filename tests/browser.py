"""Render a `metarl report` page in headless Chromium: its JavaScript errors, whether every plot
drew, and one screenshot per section.

The page is driven through the Chrome DevTools Protocol (CDP) over a websocket (aiohttp, already
a dependency), not through a browser-automation package:

- CDP reports the page's real JavaScript errors: uncaught exceptions (`Runtime.exceptionThrown`),
  `console.error` calls (`Runtime.consoleAPICalled`) and the browser's own errors
  (`Log.entryAdded`), such as a script that failed to parse;
- `Page.captureScreenshot` with a `clip` takes each `<section data-section=...>` on its own, also
  the parts below the viewport (`captureBeyondViewport`), which is what the README's pictures
  need.

Playwright (and pyppeteer) download their own browser build on install or first use; the tests
have no network, so they use the system's Chromium (Debian's `chromium` package) instead.

Usage (synchronous; asyncio runs inside)::

    from browser import ensure_chromium, render_report

    if ensure_chromium() is None: ...  # skip
    rendered = render_report("report.html", out_dir)
    rendered.errors, rendered.plots, rendered.rendered_plots, rendered.screenshots
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

log = logging.getLogger(__name__)

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
VIEWPORT = {"width": 1400, "height": 900}
APT_TIMEOUT = 900.0

# How many plotly divs the page has, and how many of them have drawn (an svg.main-svg inside).
PLOTS_JS = """JSON.stringify({
  plots: document.querySelectorAll('.plotly-graph-div').length,
  rendered: Array.from(document.querySelectorAll('.plotly-graph-div'))
    .filter(d => d.querySelector('.main-svg') !== null).length,
})"""

# Each section's box in page coordinates (the scroll offset added), rounded out to whole pixels.
SECTIONS_JS = """JSON.stringify(Array.from(document.querySelectorAll('section[data-section]'))
  .map(s => {
    const r = s.getBoundingClientRect();
    const x = Math.floor(r.left + window.scrollX), y = Math.floor(r.top + window.scrollY);
    return {
      section: s.dataset.section, run: s.dataset.run || '', x: x, y: y,
      width: Math.ceil(r.right + window.scrollX) - x,
      height: Math.ceil(r.bottom + window.scrollY) - y,
    };
  }))"""


@dataclass
class Rendered:
    """What rendering a report found.

    errors: the page's JavaScript errors (exceptions, console.error, browser log errors).
    screenshots: one PNG per section, keyed by `section`, or `run-section` (e.g. 'r1-fitness')
        when the section names a run; a key seen twice gets '-2', '-3', ... appended.
    plots: how many plotly divs the page has; rendered_plots: how many of them drew an svg.
    sections: each section's box, as measured on the page (for diagnostics).
    """

    errors: list[str] = field(default_factory=list)
    screenshots: dict[str, Path] = field(default_factory=dict)
    plots: int = 0
    rendered_plots: int = 0
    sections: list[dict[str, Any]] = field(default_factory=list)


def find_chromium() -> str | None:
    """The path of an installed Chromium or Chrome, or None."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def ensure_chromium() -> str | None:
    """An installed Chromium, installing Debian's `chromium` with apt-get when there is none, and
    only when running as root on a system with apt-get (`apt-get update` and a second try when
    the first install fails). None when none could be had; `why_no_chromium()` says why, and
    apt-get's output is logged."""
    global _why
    _why = ""
    path = find_chromium()
    if path:
        return path
    apt = shutil.which("apt-get")
    if apt is None:
        _why = "there is no apt-get"
    elif not hasattr(os, "geteuid") or os.geteuid() != 0:
        _why = "not running as root, so apt-get cannot install it"
    else:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = [apt, "install", "-y", "--no-install-recommends", "chromium"]
        for command in (install, [apt, "update"], install):
            try:
                result = subprocess.run(
                    command, capture_output=True, text=True, timeout=APT_TIMEOUT, env=env
                )
            except (OSError, subprocess.TimeoutExpired) as error:
                _why = f"{' '.join(command)} failed: {error}"
                break
            log.info("%s exited %d:\n%s%s", " ".join(command), result.returncode,
                     result.stdout[-4000:], result.stderr[-4000:])  # fmt: skip
            path = find_chromium()
            if path:
                return path
            if result.returncode != 0:
                tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or [""]
                _why = f"{' '.join(command)} exited {result.returncode}: {tail[0]}"
        _why = _why or "apt-get installed no chromium binary"
    log.warning("no chromium: %s", _why)
    return None


def why_no_chromium() -> str:
    """Why the last `ensure_chromium()` found none ('' when it found one)."""
    return _why


_why = ""


def render_report(
    html_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    timeout: float = 120,
    chromium: str | None = None,
) -> Rendered:
    """Open `html_path` in headless Chromium at a 1400-pixel-wide desktop viewport, wait until it
    has loaded and every plotly div has drawn (at most `timeout` seconds in all), and write one
    PNG per `section[data-section]` into `out_dir`.

    Raises RuntimeError when there is no Chromium, it does not start, or the page does not load
    in time. Plots that never draw are not an error here: compare `plots` with
    `rendered_plots`. Chromium (its whole process group) is killed and its temporary profile
    removed before returning, also on errors."""
    chromium = chromium or find_chromium()
    if chromium is None:
        raise RuntimeError("no chromium found (see ensure_chromium)")
    html = Path(html_path).resolve()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    profile = Path(tempfile.mkdtemp(prefix="metarl-chromium-"))
    stderr_path = profile / "stderr.log"
    process = None
    try:
        with open(stderr_path, "wb") as stderr:
            process = subprocess.Popen(
                [
                    chromium,
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--no-first-run",
                    "--no-default-browser-check",
                    "--disable-extensions",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--hide-scrollbars",
                    "--mute-audio",
                    "--remote-debugging-port=0",
                    "--remote-allow-origins=*",
                    f"--user-data-dir={profile}",
                    f"--window-size={VIEWPORT['width']},{VIEWPORT['height']}",
                    "about:blank",
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,  # its own process group: killed as one below
            )
        deadline = time.monotonic() + timeout
        port = _devtools_port(process, profile, stderr_path, deadline)
        return asyncio.run(_render(port, html, out, deadline))
    finally:
        if process is not None:
            _kill(process)
        shutil.rmtree(profile, ignore_errors=True)


def _devtools_port(
    process: subprocess.Popen, profile: Path, stderr_path: Path, deadline: float
) -> int:
    """The DevTools port Chromium chose: from its `DevTools listening on ws://HOST:PORT/...`
    line on stderr, or the DevToolsActivePort file in the profile."""
    while time.monotonic() < deadline:
        match = re.search(rb"DevTools listening on ws://[^:/\s]+:(\d+)/", stderr_path.read_bytes())
        if match:
            return int(match.group(1))
        active = profile / "DevToolsActivePort"
        if active.exists():
            first = active.read_text().splitlines()[:1]
            if first and first[0].strip().isdigit():
                return int(first[0])
        if process.poll() is not None:
            raise RuntimeError(
                f"chromium exited with status {process.returncode}:\n"
                + stderr_path.read_text(errors="replace")[-3000:]
            )
        time.sleep(0.1)
    raise RuntimeError(
        "chromium did not open its DevTools port:\n"
        + stderr_path.read_text(errors="replace")[-3000:]
    )


def _kill(process: subprocess.Popen) -> None:
    """SIGTERM Chromium's process group, SIGKILL it after 5 seconds, and SIGKILL whatever of the
    group outlived its leader (renderers, the zygote)."""
    _signal_group(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        _signal_group(process.pid, signal.SIGKILL)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.warning("chromium (pid %d) did not exit", process.pid)
    _signal_group(process.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        log.debug("chromium's process group %d is already gone", pgid)


class _Page:
    """A CDP session on one page target: commands (`call`) and events (`on`, `wait_for`)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse):
        self.ws = ws
        self.next_id = 0
        self.pending: dict[int, asyncio.Future] = {}
        self.handlers: dict[str, list] = {}
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    continue
                data = json.loads(message.data)
                if "id" in data:
                    future = self.pending.pop(data["id"], None)
                    if future is not None and not future.done():
                        if "error" in data:
                            future.set_exception(RuntimeError(f"CDP error: {data['error']}"))
                        else:
                            future.set_result(data.get("result", {}))
                else:
                    for handler in list(self.handlers.get(data.get("method", ""), [])):
                        handler(data.get("params", {}))
        finally:
            for future in self.pending.values():
                if not future.done():
                    future.set_exception(RuntimeError("the DevTools connection closed"))

    async def call(self, method: str, params: dict | None = None, timeout: float = 60) -> dict:
        self.next_id += 1
        future = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = future
        await self.ws.send_json({"id": self.next_id, "method": method, "params": params or {}})
        return await asyncio.wait_for(future, timeout)

    def on(self, method: str, handler) -> None:
        self.handlers.setdefault(method, []).append(handler)

    def event(self, method: str) -> asyncio.Future:
        """A future that the next `method` event completes (register it before causing it)."""
        future = asyncio.get_running_loop().create_future()

        def handler(params):
            if not future.done():
                future.set_result(params)
            self.handlers[method].remove(handler)

        self.on(method, handler)
        return future

    async def evaluate(self, expression: str) -> Any:
        result = await self.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluating failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def close(self) -> None:
        await self.ws.close()
        self.reader.cancel()


async def _render(port: int, html: Path, out: Path, deadline: float) -> Rendered:
    rendered = Rendered()
    base = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        async with http.put(f"{base}/json/new?about:blank") as response:
            response.raise_for_status()
            target = await response.json(content_type=None)
        ws = await http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0)
        page = _Page(ws)
        try:
            page.on("Runtime.exceptionThrown", lambda p: rendered.errors.append(_exception(p)))
            page.on("Runtime.consoleAPICalled", lambda p: _console(p, rendered.errors))
            page.on("Log.entryAdded", lambda p: _log_entry(p, rendered.errors))
            for domain in ("Runtime", "Log", "Page"):
                await page.call(f"{domain}.enable")
            await page.call(
                "Emulation.setDeviceMetricsOverride",
                {**VIEWPORT, "deviceScaleFactor": 1, "mobile": False},
            )
            loaded = page.event("Page.loadEventFired")
            navigated = await page.call("Page.navigate", {"url": html.as_uri()})
            if navigated.get("errorText"):
                raise RuntimeError(f"navigating to {html} failed: {navigated['errorText']}")
            await asyncio.wait_for(loaded, max(deadline - time.monotonic(), 1))
            counts = await _wait_for_plots(page, deadline)
            rendered.plots, rendered.rendered_plots = counts["plots"], counts["rendered"]
            # layout settles (fonts, plotly's resize) before measuring
            await page.evaluate("new Promise(r => requestAnimationFrame(() => r(1)))")
            rendered.sections = json.loads(await page.evaluate(SECTIONS_JS))
            for box in rendered.sections:
                key = f"{box['run']}-{box['section']}" if box["run"] else box["section"]
                name, n = key, 1
                while name in rendered.screenshots:
                    n += 1
                    name = f"{key}-{n}"
                if box["width"] <= 0 or box["height"] <= 0:
                    log.warning("section %s has an empty box: %s", name, box)
                    continue
                shot = await page.call(
                    "Page.captureScreenshot",
                    {
                        "format": "png",
                        "clip": {
                            "x": box["x"],
                            "y": box["y"],
                            "width": box["width"],
                            "height": box["height"],
                            "scale": 1,
                        },
                        "captureBeyondViewport": True,
                    },
                    timeout=max(deadline - time.monotonic(), 10),
                )
                path = out / f"{name}.png"
                path.write_bytes(base64.b64decode(shot["data"]))
                rendered.screenshots[name] = path
            # errors reported while capturing arrive asynchronously: let them in
            await asyncio.sleep(0.2)
        finally:
            await page.close()
    return rendered


async def _wait_for_plots(page: _Page, deadline: float) -> dict:
    """Poll until every plotly div has an svg.main-svg, or the deadline; the last counts."""
    while True:
        counts = json.loads(await page.evaluate(PLOTS_JS))
        if counts["rendered"] >= counts["plots"] or time.monotonic() >= deadline:
            return counts
        await asyncio.sleep(0.25)


def _exception(params: dict) -> str:
    details = params.get("exceptionDetails", {})
    exception = details.get("exception", {})
    text = exception.get("description") or details.get("text", "exception")
    where = f"{details.get('url', '')}:{details.get('lineNumber', '?')}"
    return f"exception at {where}: {text}"


def _console(params: dict, errors: list[str]) -> None:
    if params.get("type") != "error":
        return
    parts = [
        str(arg.get("value", arg.get("description", arg.get("type", ""))))
        for arg in params.get("args", [])
    ]
    errors.append("console.error: " + " ".join(parts))


def _log_entry(params: dict, errors: list[str]) -> None:
    entry = params.get("entry", {})
    if entry.get("level") == "error":
        url = f" ({entry['url']})" if entry.get("url") else ""
        errors.append(f"log ({entry.get('source', '?')}): {entry.get('text', '')}{url}")
