#!/usr/bin/env python3
"""web_screenshots.py — regenerates the chat page screenshots in docs/img/ (README,
docs/web.md): starts `cinfer serve` on the 0.5B model, drives the page in headless chromium
(Selenium), and saves a chat (light), a chat (dark) and the status view with some traffic.
Usage: scripts/web_screenshots.py [BIN] [MODEL]   (needs chromium, chromium-driver, selenium)
"""
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "build", "cinfer")
MODEL = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
    REPO, "models", "qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf")
OUT = os.path.join(REPO, "docs", "img")
PORT = 18931
BASE = f"http://127.0.0.1:{PORT}"


def wait(cond, timeout=300):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            if cond():
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise SystemExit("timed out")


def busy_traffic(stop):
    body = json.dumps({"messages": [{"role": "user", "content": "Count from 1 to 30."}],
                       "max_tokens": 60, "temperature": 0}).encode()
    while not stop.is_set():
        req = urllib.request.Request(BASE + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=300).read()
        except OSError:
            return


def main():
    os.makedirs(OUT, exist_ok=True)
    srv = subprocess.Popen([BIN, "serve", MODEL, "--port", str(PORT), "--no-open"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait(lambda: urllib.request.urlopen(BASE + "/health", timeout=2).status == 200)
        o = webdriver.ChromeOptions()
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,760"):
            o.add_argument(a)
        o.binary_location = "/usr/bin/chromium"
        d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)
        d.get(BASE + "/")
        d.execute_script("localStorage.setItem('cinfer.settings', JSON.stringify({temperature: 0, max_tokens: 300}))")
        d.refresh()
        box = d.find_element(By.ID, "input")
        box.click()
        box.send_keys("Write a short Python function that checks whether a number is prime, "
                      "then give its complexity as a formula.", Keys.ENTER)
        wait(lambda: d.find_element(By.ID, "send").is_displayed()
             and d.find_elements(By.CSS_SELECTOR, ".msg.assistant .regenerate"))
        d.save_screenshot(os.path.join(OUT, "web-chat.png"))
        d.execute_cdp_cmd("Emulation.setEmulatedMedia",
                          {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        time.sleep(0.5)
        d.save_screenshot(os.path.join(OUT, "web-chat-dark.png"))
        d.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        stop = threading.Event()
        t = threading.Thread(target=busy_traffic, args=(stop,), daemon=True)
        t.start()
        d.get(BASE + "/#/status")
        time.sleep(40)
        d.save_screenshot(os.path.join(OUT, "web-status.png"))
        stop.set()
        d.quit()
    finally:
        srv.terminate()
        srv.wait()


if __name__ == "__main__":
    main()
