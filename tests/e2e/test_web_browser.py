"""test_web_browser.py — the chat page and status view in a real browser: Debian's chromium,
headless, driven through chromium-driver by Selenium, against the real `cinfer serve`
(stories260K; the 0.5B model for stop, tool calls and a Markdown answer). Checks: the page
loads with no console errors (the cold load's first paint is reported, not asserted); a
message streams a reply equal to the API's greedy answer for the same request; Enter sends,
Shift+Enter adds a line; regenerate, edit and resend; conversations survive a reload (rename,
delete); model output with <script>, event handlers and javascript: links runs nothing;
code is highlighted with a copy button and math rendered; the reasoning block shows while
and after it streams; stop cancels (/stats counts it); a tool call is rendered; the API-key
prompt; /status shows live figures.

Screenshots and the first-paint figure go to $CINFER_WEB_ARTIFACTS (default
/tmp/cinfer-web-artifacts); they are test artifacts, not committed. Needs the chromium and
chromium-driver Debian packages (scripts/deps.sh) and selenium (scripts/test.sh);
CINFER_WEB_ALLOW_NO_BROWSER=1 skips instead of failing when they are missing.
"""
import json
import os
import shutil
import time

import pytest

from conftest import STORIES, STORIES_TEMPLATE, Server

ART = os.environ.get("CINFER_WEB_ARTIFACTS", "/tmp/cinfer-web-artifacts")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
R1 = os.path.join(os.path.dirname(__file__), "..", "data", "web",
                  "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


def _need_browser():
    missing = []
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (python3 -m pip install selenium)")
    for p in (CHROMIUM, DRIVER):
        if not os.path.exists(p):
            missing.append(p + " (apt-get install chromium chromium-driver)")
    if missing:
        msg = "browser tests need: " + ", ".join(missing)
        if os.environ.get("CINFER_WEB_ALLOW_NO_BROWSER") == "1":
            pytest.skip(msg)
        pytest.fail(msg + " — or set CINFER_WEB_ALLOW_NO_BROWSER=1 to skip")


def new_driver(width=1200, height=900):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    o = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              f"--window-size={width},{height}", "--no-first-run", "--disable-extensions"):
        o.add_argument(a)
    o.binary_location = CHROMIUM
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(DRIVER), options=o)
    d.set_page_load_timeout(120)
    d.set_script_timeout(120)
    return d


@pytest.fixture(scope="module")
def driver():
    _need_browser()
    os.makedirs(ART, exist_ok=True)
    d = new_driver()
    yield d
    d.quit()


def wait(cond, timeout=120, what="condition"):
    """Polls cond() until truthy (returns its value); generous bound for a loaded machine."""
    t0 = time.time()
    last = None
    while time.time() - t0 < timeout:
        try:
            v = cond()
            if v:
                return v
        except Exception as e:  # element not there yet, stale, ...
            last = e
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what} (last error: {last})")


def click(d, css, what=None):
    """Finds and clicks css, again when the page re-rendered the element in between (the
    message list is redrawn as a reply finishes: a found element can go stale)."""
    from selenium.webdriver.common.by import By

    def go():
        d.find_element(By.CSS_SELECTOR, css).click()
        return True
    return wait(go, what=what or f"a click on {css}")


def js(d, script, *args):
    return d.execute_script(script, *args)


def console_errors(d):
    return [e for e in d.get_log("browser") if e["level"] == "SEVERE"]


def shot(d, name):
    d.save_screenshot(os.path.join(ART, name + ".png"))


def open_page(d, srv, settings=None, convs=None, hash_="#/chat", key=None):
    """Loads the page on srv's origin with a clean storage (plus the given settings /
    conversations) and waits for the app to start."""
    d.get(srv.base + "/" + hash_)
    js(d, "localStorage.clear()")
    if settings is not None:
        js(d, "localStorage.setItem('cinfer.settings', arguments[0])", json.dumps(settings))
    if convs is not None:
        js(d, "localStorage.setItem('cinfer.convs', arguments[0]);"
              "localStorage.setItem('cinfer.current', JSON.stringify(arguments[1]))",
           json.dumps(convs), convs[0]["id"])
    if key is not None:
        js(d, "localStorage.setItem('cinfer.apikey', arguments[0])", key)
    d.get(srv.base + "/" + hash_)
    d.refresh()
    wait(lambda: js(d, "return document.readyState") == "complete", what="page load")
    d.get_log("browser")  # start each test's console check fresh


def conversation(d):
    convs = json.loads(js(d, "return localStorage.getItem('cinfer.convs')") or "[]")
    cur = json.loads(js(d, "return localStorage.getItem('cinfer.current')") or "null")
    return next((c for c in convs if c["id"] == cur), None)


def send(d, text):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    box = d.find_element(By.ID, "input")
    box.click()  # after a modal dialog closed, typing without a click first is lost
    box.clear()
    box.send_keys(text, Keys.ENTER)


def wait_reply_done(d, n_msgs):
    """Waits until the current conversation holds n_msgs messages and the last one finished."""
    def done():
        c = conversation(d)
        if not c or len(c["messages"]) != n_msgs:
            return None
        m = c["messages"][-1]
        return m if m["role"] == "assistant" and not m.get("streaming") else None
    return wait(done, what=f"a finished reply ({n_msgs} messages)")


def api_answer(srv, messages, **kw):
    body = {"messages": messages, **kw}
    st, raw, _ = srv.post("/v1/chat/completions", body)
    assert st == 200, raw
    return json.loads(raw)["choices"][0]["message"]


# ---- servers -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def web_stories():
    s = Server(STORIES, "--chat-template", STORIES_TEMPLATE)
    yield s
    assert s.stop() == 0, s.output()


# ---- stories260K ----------------------------------------------------------------------------

def test_cold_load_no_console_errors(web_stories):
    """A fresh browser (empty cache) loads the page: no console errors; first paint reported."""
    _need_browser()
    os.makedirs(ART, exist_ok=True)
    d = new_driver()
    try:
        d.get(web_stories.base + "/")
        wait(lambda: js(d, "return document.readyState") == "complete", what="page load")
        wait(lambda: "stories260K" in js(d, "return document.getElementById('model-name').textContent"),
             what="the model name")
        paint = js(d, "return performance.getEntriesByType('paint').map(e => [e.name, e.startTime])")
        fp = dict(paint).get("first-contentful-paint") or dict(paint).get("first-paint")
        assert fp is not None, paint
        with open(os.path.join(ART, "first_paint.txt"), "w") as f:
            f.write(f"cold load on loopback: first contentful paint {fp:.0f} ms "
                    f"(load average {os.getloadavg()[0]:.2f})\n")
        print(f"\nweb: cold-load first contentful paint {fp:.0f} ms on loopback "
              f"(load average {os.getloadavg()[0]:.2f})")
        # every library the page needs arrived and ran
        assert js(d, "return !!(window.marked && window.DOMPurify && window.hljs && window.katex)")
        assert console_errors(d) == []
        # usable at phone width: the sidebar hides behind the menu button
        d.set_window_size(390, 800)
        assert js(d, "return document.getElementById('menu-btn').offsetParent !== null")
        wait(lambda: js(d, "return document.getElementById('sidebar').getBoundingClientRect().right <= 1"),
             what="the sidebar off screen at phone width")
        shot(d, "phone")
    finally:
        d.quit()


def test_chat_streams_greedy_answer(web_stories, driver):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    d = driver
    open_page(d, web_stories, settings={"temperature": 0, "max_tokens": 60})
    # Shift+Enter adds a line, Enter sends
    box = d.find_element(By.ID, "input")
    box.send_keys("a", Keys.SHIFT, Keys.ENTER, Keys.NULL, "b")
    assert box.get_attribute("value") == "a\nb"
    assert conversation(d) is None or not conversation(d)["messages"]
    send(d, "Once upon a time")
    m = wait_reply_done(d, 2)
    want = api_answer(web_stories, [{"role": "user", "content": "Once upon a time"}],
                      temperature=0, max_tokens=60)
    assert conversation(d)["messages"][0]["content"] == "Once upon a time"
    assert m["content"] == want["content"] and len(m["content"]) > 20
    shown = d.find_elements(By.CSS_SELECTOR, ".msg.assistant .body")[-1].text
    assert want["content"].split()[0] in shown and want["content"].split()[-1].strip('."') in shown
    stats = d.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats")[-1].text
    assert "60 tokens" in stats and "tok/s" in stats and "TTFT" in stats and "cached" in stats
    assert console_errors(d) == []
    shot(d, "chat-stories")


def test_regenerate_edit_resend(web_stories, driver):
    from selenium.webdriver.common.by import By
    d = driver
    open_page(d, web_stories, settings={"temperature": 0, "max_tokens": 30})
    send(d, "Once upon a time")
    first = wait_reply_done(d, 2)["content"]
    # regenerate: same greedy answer, same number of messages
    click(d, ".msg.assistant .regenerate")
    wait(lambda: conversation(d)["messages"][-1].get("streaming") or
         conversation(d)["messages"][-1]["content"] == first, what="regenerate to start")
    assert wait_reply_done(d, 2)["content"] == first
    # edit the question and send it: the conversation is cut after it
    click(d, ".msg.user .edit")
    ta = wait(lambda: d.find_element(By.CSS_SELECTOR, ".msg.user .edit-box"))
    ta.clear()
    ta.send_keys("Lily and the dog")
    click(d, ".msg.user .save-edit")
    wait(lambda: conversation(d)["messages"][0]["content"] == "Lily and the dog", what="the edit")
    edited = wait_reply_done(d, 2)["content"]
    want = api_answer(web_stories, [{"role": "user", "content": "Lily and the dog"}],
                      temperature=0, max_tokens=30)["content"]
    assert edited == want
    # resend: the same request again
    click(d, ".msg.user .resend")
    time.sleep(0.05)
    assert wait_reply_done(d, 2)["content"] == want
    assert console_errors(d) == []


def test_conversations_survive_reload(web_stories, driver):
    from selenium.webdriver.common.by import By
    d = driver
    open_page(d, web_stories, settings={"temperature": 0, "max_tokens": 10})
    send(d, "Once upon a time")
    a = wait_reply_done(d, 2)
    d.find_element(By.ID, "new-chat").click()
    send(d, "The cat")
    b = wait_reply_done(d, 2)
    d.refresh()
    wait(lambda: len(d.find_elements(By.CSS_SELECTOR, "#conv-list li")) == 2, what="the list")
    titles = [e.text for e in d.find_elements(By.CSS_SELECTOR, "#conv-list .title")]
    assert titles == ["The cat", "Once upon a time"]
    assert d.find_elements(By.CSS_SELECTOR, ".msg.assistant .body")[-1].text.strip() == \
        b["content"].strip()
    d.find_elements(By.CSS_SELECTOR, "#conv-list .title")[1].click()
    wait(lambda: d.find_elements(By.CSS_SELECTOR, ".msg.user")[0].text.startswith("Once upon"))
    assert conversation(d)["messages"][1]["content"] == a["content"]
    # rename and delete go through the browser's prompt/confirm
    d.find_elements(By.CSS_SELECTOR, "#conv-list .rename")[1].click()
    al = wait(lambda: d.switch_to.alert)
    al.send_keys("Renamed")
    al.accept()
    wait(lambda: d.find_elements(By.CSS_SELECTOR, "#conv-list .title")[1].text == "Renamed")
    # export all: the JSON the browser would download (the blob and the link are caught)
    name, text = d.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const origUrl = URL.createObjectURL, origClick = HTMLAnchorElement.prototype.click;
        let blob = null;
        URL.createObjectURL = (b) => { blob = b; return origUrl(b); };
        HTMLAnchorElement.prototype.click = function () {
            URL.createObjectURL = origUrl;
            HTMLAnchorElement.prototype.click = origClick;
            blob.text().then((t) => done([this.download, t]));
        };
        document.getElementById('export-all').click();""")
    exported = json.loads(text)
    assert name == "cinfer-chats.json" and [c["title"] for c in exported] == ["The cat", "Renamed"]
    assert exported[1]["messages"][1]["content"] == a["content"]
    d.find_elements(By.CSS_SELECTOR, "#conv-list .delete")[0].click()
    wait(lambda: d.switch_to.alert).accept()
    d.refresh()
    wait(lambda: [e.text for e in d.find_elements(By.CSS_SELECTOR, "#conv-list .title")] ==
         ["Renamed"], what="rename + delete kept")
    assert console_errors(d) == []


def test_system_prompt(web_stories, driver):
    from selenium.webdriver.common.by import By
    d = driver
    open_page(d, web_stories, settings={"temperature": 0, "max_tokens": 30})
    d.find_element(By.CSS_SELECTOR, "#sys-box summary").click()
    sp = d.find_element(By.ID, "sys-prompt")
    sp.send_keys("Tom had a red ball.")
    send(d, "Once upon a time")
    m = wait_reply_done(d, 2)
    want = api_answer(web_stories, [{"role": "system", "content": "Tom had a red ball."},
                                    {"role": "user", "content": "Once upon a time"}],
                      temperature=0, max_tokens=30)
    assert m["content"] == want["content"]
    assert conversation(d)["system"] == "Tom had a red ball."
    # a new chat starts with the last system prompt used
    d.find_element(By.ID, "new-chat").click()
    assert d.find_element(By.ID, "sys-prompt").get_attribute("value") == "Tom had a red ball."
    assert console_errors(d) == []


EVIL = ("Hello <script>window.__pwned = 1</script>\n\n"
        "<img src=x onerror=\"window.__pwned = 2\"> [link](javascript:window.__pwned=3)\n\n"
        "<a href=\"javascript:window.__pwned=4\" id=evil>x</a> <iframe src=\"javascript:1\"></iframe>"
        "<svg><script>window.__pwned=5</script></svg>\n\n"
        "```python\ndef add(a, b):\n    return a + b  # $not math$\n```\n\n"
        "Euler: $e^{i\\pi} + 1 = 0$ and\n\n$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$\n\n"
        "| a | b |\n|---|---|\n| 1 | 2 |\n")


def test_markdown_is_sanitized_highlighted_and_math(web_stories, driver):
    """A stored reply (rendered exactly like a streamed one) with <script>, event handlers
    and javascript: links runs nothing; its code is highlighted with a copy button, its math
    rendered by KaTeX, its table kept."""
    from selenium.webdriver.common.by import By
    d = driver
    conv = {"id": "evil1", "title": "evil", "system": "", "updated": 1,
            "messages": [{"role": "user", "content": "<b>bold?</b><script>window.__pwned=9</script>"},
                         {"role": "assistant", "content": EVIL, "stats": {"completion": 3}}]}
    open_page(d, web_stories, convs=[conv])
    wait(lambda: d.find_elements(By.CSS_SELECTOR, ".msg.assistant pre code"), what="render")
    # clicking the evil link does nothing either
    for a in d.find_elements(By.CSS_SELECTOR, "#messages a"):
        href = a.get_attribute("href") or ""
        assert not href.lower().startswith("javascript"), href
    assert js(d, "return window.__pwned === undefined")
    m = d.find_element(By.ID, "messages")
    assert not m.find_elements(By.CSS_SELECTOR, "script, iframe, [onerror], [onclick]")
    assert "<b>bold?</b>" in d.find_element(By.CSS_SELECTOR, ".msg.user .body").text
    code = d.find_element(By.CSS_SELECTOR, ".msg.assistant pre code")
    assert "hljs" in code.get_attribute("class")
    assert code.find_elements(By.CSS_SELECTOR, "span.hljs-keyword")
    assert "$not math$" in code.text
    assert len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant .katex")) == 2
    assert d.find_elements(By.CSS_SELECTOR, ".msg.assistant .katex-display")
    assert d.find_elements(By.CSS_SELECTOR, ".msg.assistant table td")
    btn = d.find_element(By.CSS_SELECTOR, ".msg.assistant pre .copy")
    btn.click()
    wait(lambda: btn.text == "Copied", what="copy feedback")
    assert js(d, "return window.__pwned === undefined")
    shot(d, "markdown")
    assert console_errors(d) == []


def test_reasoning_block():
    """A thinking template (R1 distill opens <think> in the prompt; stories never closes it):
    the reply is reasoning, shown open while it streams and collapsed after."""
    _need_browser()
    from selenium.webdriver.common.by import By
    s = Server(STORIES, "--chat-template", R1)
    d = new_driver()
    try:
        open_page(d, s, settings={"temperature": 0, "max_tokens": 200, "thinking": "on"})
        js(d, "window.__sawOpen = false; new MutationObserver(() => {"
              " if (document.querySelector('#messages details.reasoning[open]')) window.__sawOpen = true;"
              "}).observe(document.getElementById('messages'), {subtree: true, childList: true, attributes: true})")
        send(d, "Once upon a time")
        m = wait_reply_done(d, 2)
        want = api_answer(s, [{"role": "user", "content": "Once upon a time"}], temperature=0,
                          max_tokens=200, chat_template_kwargs={"enable_thinking": True})
        assert m["reasoning"] == want["reasoning"] and len(m["reasoning"]) > 20
        assert js(d, "return window.__sawOpen") is True
        det = d.find_element(By.CSS_SELECTOR, ".msg.assistant details.reasoning")
        assert det.get_attribute("open") is None          # collapsed once done
        det.find_element(By.TAG_NAME, "summary").click()
        assert want["reasoning"].split()[0] in det.text
        shot(d, "reasoning")
        assert console_errors(d) == []
    finally:
        d.quit()
        assert s.stop() == 0, s.output()


def test_api_key_prompt():
    _need_browser()
    from selenium.webdriver.common.by import By
    s = Server(STORIES, "--chat-template", STORIES_TEMPLATE, "--api-key", "sekret-key")
    d = new_driver()
    try:
        d.get(s.base + "/")
        dlg = wait(lambda: d.find_element(By.ID, "key-dlg").get_attribute("open") is not None and
                   d.find_element(By.ID, "key-dlg"), what="the key prompt")
        shot(d, "api-key")
        dlg.find_element(By.ID, "key-input").send_keys("sekret-key")
        dlg.find_element(By.ID, "key-ok").click()
        wait(lambda: d.find_element(By.ID, "model-name").text == "stories260K", what="models")
        send(d, "Once upon a time")
        m = wait_reply_done(d, 2)
        assert m["content"] and not m.get("error")
        assert js(d, "return localStorage.getItem('cinfer.apikey')") == "sekret-key"
        # the console shows the browser's own line for the first 401 only
        errs = [e for e in console_errors(d) if "401" not in e["message"]]
        assert errs == []
    finally:
        d.quit()
        assert s.stop() == 0, s.output()


def test_status_view_live(web_stories, driver):
    from selenium.webdriver.common.by import By
    d = driver
    open_page(d, web_stories, hash_="#/chat")
    d.get(web_stories.base + "/status")          # the 302 lands on /#/status
    wait(lambda: d.current_url.endswith("/#/status"), what="the redirect")
    wait(lambda: int(js(d, "return document.body.dataset.statsPolls || 0")) >= 1, what="a poll")
    before = web_stories.stats()["requests"]["chat"]
    web_stories.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                              "max_tokens": 5})

    def card(title, key):
        for c in d.find_elements(By.CSS_SELECTOR, "#status-cards .card"):
            if c.find_element(By.TAG_NAME, "h4").text == title:
                return c.find_element(By.CSS_SELECTOR, f'dd[data-key="{key}"]').text
    wait(lambda: card("Requests", "chat") == str(before + 1), what="the live request count")
    assert card("Model", "model") == "stories260K"
    assert card("Model", "backend") == "cpu (host memory)"
    assert card("Model", "health") == "ok"
    assert card("Memory plan", "weights").endswith("GB")
    assert card("Prompt cache", "hit rate").endswith("%")
    assert card("Batch", "mode").startswith("batch")
    assert d.find_element(By.ID, "chart-tps").size["height"] > 50
    assert d.find_element(By.ID, "chat-view").get_attribute("hidden") is not None
    shot(d, "status")
    assert console_errors(d) == []


# ---- the 0.5B model ---------------------------------------------------------------------------

def test_qwen_stream_stop_and_markdown(qwen, driver):
    """The real chat model: a greedy reply equal to the API's; a long reply stopped from the
    page is cancelled on the server (/stats counts it)."""
    from selenium.webdriver.common.by import By
    d = driver
    q = "Write a Python function that checks whether a number is prime. Be brief."
    open_page(d, qwen, settings={"temperature": 0, "max_tokens": 120})
    send(d, q)
    m = wait_reply_done(d, 2)
    want = api_answer(qwen, [{"role": "user", "content": q}], temperature=0, max_tokens=120)
    assert m["content"] == want["content"]
    assert m["content"].startswith("```python\ndef ")    # cut inside the fence by max_tokens
    code = d.find_element(By.CSS_SELECTOR, ".msg.assistant pre code.hljs")
    assert code.text.startswith("def ") and code.find_elements(By.CSS_SELECTOR, ".hljs-keyword")
    shot(d, "chat-qwen")
    # stop
    cancelled = qwen.stats()["requests"]["cancelled"]
    open_page(d, qwen, settings={"temperature": 0, "max_tokens": 3000})
    send(d, "Write a very long story about a dragon who learns to cook. Use many chapters.")
    wait(lambda: len(conversation_text(d)) > 10, what="streamed text")
    assert d.find_element(By.ID, "stop").is_displayed()
    d.find_element(By.ID, "stop").click()
    m = wait_reply_done(d, 2)
    assert m["stats"]["finish"] == "stopped" and len(m["content"]) > 0
    wait(lambda: qwen.stats()["requests"]["cancelled"] >= cancelled + 1, what="the cancel")
    assert d.find_element(By.ID, "send").is_displayed()
    assert console_errors(d) == []


def conversation_text(d):
    from selenium.webdriver.common.by import By
    els = d.find_elements(By.CSS_SELECTOR, ".msg.assistant .body")
    return els[-1].text if els else ""


def test_qwen_tool_call_rendered(qwen, driver):
    from selenium.webdriver.common.by import By
    d = driver
    open_page(d, qwen, settings={"temperature": 0, "max_tokens": 60,
                                 "tools": json.dumps([WEATHER])})
    send(d, "What is the weather in Paris?")
    m = wait_reply_done(d, 2)
    assert m["tool_calls"][0]["function"]["name"] == "get_weather"
    card = d.find_element(By.CSS_SELECTOR, ".msg.assistant .tool-call")
    assert "get_weather" in card.find_element(By.CSS_SELECTOR, ".tool-name").text
    assert json.loads(card.find_element(By.TAG_NAME, "pre").text) == {"city": "Paris"}
    assert m["stats"]["finish"] == "tool_calls"
    # answering the call sends a tool message and the model goes on
    card.find_element(By.CSS_SELECTOR, ".tool-reply input").send_keys('{"temp_c": 21}')
    card.find_element(By.CSS_SELECTOR, ".tool-reply button").click()
    wait_reply_done(d, 4)
    roles = [x["role"] for x in conversation(d)["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert d.find_elements(By.CSS_SELECTOR, ".msg.tool details.tool-result")
    shot(d, "tool-call")
    assert console_errors(d) == []
