"""A headless Chromium driven over the DevTools protocol (websockets), for
looking at the viewer the way a person's browser shows it. `chromium()`
returns None when no Chromium is installed."""
from __future__ import annotations

import base64
import contextlib
import io
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import numpy as np


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chromium_path():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Page:
    def __init__(self, ws):
        self.ws = ws
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def screenshot(self) -> np.ndarray:
        from PIL import Image
        data = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))

    def evaluate(self, expression):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")


@contextlib.contextmanager
def chromium(url: str, width: int, height: int):
    """A headless Chromium showing `url` in a width x height window (device
    pixel ratio 1, WebGL through SwiftShader)."""
    from websockets.sync.client import connect
    exe = chromium_path()
    port = free_port()
    profile = tempfile.mkdtemp(prefix="splat-chromium-")
    proc = subprocess.Popen(
        [exe, "--headless=new", "--no-sandbox", "--disable-gpu-sandbox", "--use-angle=swiftshader",
         "--enable-unsafe-swiftshader", "--no-first-run", "--no-default-browser-check",
         "--force-device-scale-factor=1", f"--window-size={width},{height}", f"--user-data-dir={profile}",
         f"--remote-debugging-port={port}", "--remote-allow-origins=*", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        targets = None
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
                    targets = [t for t in json.load(r) if t.get("type") == "page"]
                if targets:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        if not targets:
            raise RuntimeError("chromium did not start its DevTools endpoint")
        with connect(targets[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=30) as ws:
            page = Page(ws)
            page.call("Page.enable")
            page.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                      mobile=False)
            page.call("Page.navigate", url=url)
            yield page
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
