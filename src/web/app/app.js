/* app.js — cinfer's browser chat page and status view (served by src/web, embedded in the
 * binary). Plain browser JavaScript, no build step. Markdown goes through marked, then
 * DOMPurify (nothing the model writes reaches the page unsanitized), then highlight.js on
 * code blocks and KaTeX on math kept apart from the Markdown. Conversations and settings
 * live in localStorage; nothing is fetched except this server's own API.
 */
'use strict';
(function () {
  const $ = (id) => document.getElementById(id);
  const LS = { convs: 'cinfer.convs', cur: 'cinfer.current', set: 'cinfer.settings', key: 'cinfer.apikey' };

  function load(k, dflt) {
    try { const v = JSON.parse(localStorage.getItem(k)); return v == null ? dflt : v; } catch (e) { return dflt; }
  }
  function save(k, v) { localStorage.setItem(k, JSON.stringify(v)); }

  let settings = load(LS.set, {});
  let convs = load(LS.convs, []);
  let curId = load(LS.cur, null);
  let apiKey = localStorage.getItem(LS.key) || '';
  let busy = null;          /* {ctrl, conv} while a reply streams */
  let modelInfo = null;

  /* ---- API ------------------------------------------------------------------------------ */

  let keyWaiters = null;
  function askKey() {
    if (keyWaiters) return new Promise((res) => keyWaiters.push(res));
    keyWaiters = [];
    return new Promise((res) => {
      keyWaiters.push(res);
      const dlg = $('key-dlg');
      $('key-input').value = '';
      dlg.onclose = () => {
        apiKey = $('key-input').value.trim();
        localStorage.setItem(LS.key, apiKey);
        const w = keyWaiters; keyWaiters = null;
        w.forEach((f) => f());
      };
      dlg.showModal();
    });
  }

  /* fetch with the key; a 401 asks for the key and tries again (once per ask). */
  async function api(path, opts) {
    for (let attempt = 0; ; attempt++) {
      const o = Object.assign({}, opts || {});
      o.headers = Object.assign({}, o.headers || {});
      if (apiKey) o.headers['Authorization'] = 'Bearer ' + apiKey;
      const r = await fetch(path, o);
      if (r.status !== 401 || attempt >= 3) return r;
      await askKey();
    }
  }

  /* ---- Markdown ------------------------------------------------------------------------- */

  DOMPurify.addHook('afterSanitizeAttributes', (node) => {
    if (node.tagName === 'A') { node.setAttribute('target', '_blank'); node.setAttribute('rel', 'noopener noreferrer'); }
  });
  if (window.marked && marked.setOptions) marked.setOptions({ gfm: true, breaks: false, mangle: false, headerIds: false });

  /* Math is cut out before Markdown (so marked does not eat its backslashes and underscores)
   * and put back after sanitizing, rendered by KaTeX; code spans and fences keep theirs. */
  const MATH_RE = /(```[\s\S]*?(?:```|$)|`[^`\n]*`)|(\$\$[\s\S]+?\$\$|\\\[[\s\S]+?\\\]|\\\([\s\S]+?\\\)|\$[^\s$\d](?:[^$\n]*?[^\s$\\])?\$)/g;

  /* streaming: skip highlight.js's language guess (it tries every language) until the end */
  function renderMarkdown(text, el, streaming) {
    const math = [];
    const src = text.replace(MATH_RE, (m, code, tex) => {
      if (code) return m;
      math.push(tex);
      return '%%MATH' + (math.length - 1) + '%%';
    });
    /* a fence still open (a reply streaming, or cut by max_tokens) is closed, so its code
     * renders as code: marked would otherwise read it as a paragraph */
    const fences = src.match(/^ {0,3}(```|~~~)/gm);
    const closed = fences && fences.length % 2 ? src + '\n' + fences[fences.length - 1].trim() : src;
    const html = DOMPurify.sanitize(marked.parse(closed), { USE_PROFILES: { html: true } });
    el.innerHTML = html;
    el.querySelectorAll('pre > code').forEach((c) => decorateCode(c, streaming));
    if (math.length) putMath(el, math);
  }

  function decorateCode(code, streaming) {
    const m = /language-([\w+#-]+)/.exec(code.className || '');
    const raw = code.textContent;
    try {
      const lang = m && hljs.getLanguage(m[1]) ? m[1] : null;
      const out = lang ? hljs.highlight(lang, raw, true) : streaming ? null : hljs.highlightAuto(raw);
      if (out) code.innerHTML = out.value;        /* highlight.js escapes the text it wraps */
      code.classList.add('hljs');
    } catch (e) { /* leave it plain */ }
    const pre = code.parentNode;
    const btn = document.createElement('button');
    btn.className = 'copy';
    btn.type = 'button';
    btn.textContent = 'Copy';
    btn.onclick = () => copyText(raw, btn);
    pre.classList.add('has-copy');
    pre.appendChild(btn);
  }

  function copyText(t, btn) {
    const done = () => { btn.textContent = 'Copied'; setTimeout(() => (btn.textContent = 'Copy'), 1200); };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(t).then(done, () => fallbackCopy(t, done));
    } else fallbackCopy(t, done);
  }
  function fallbackCopy(t, done) {
    const ta = document.createElement('textarea');
    ta.value = t; document.body.appendChild(ta); ta.select();
    try { document.execCommand('copy'); } catch (e) { /* ignore */ }
    ta.remove(); done();
  }

  function putMath(root, math) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    const nodes = [];
    while (walker.nextNode()) if (walker.currentNode.nodeValue.indexOf('%%MATH') >= 0) nodes.push(walker.currentNode);
    nodes.forEach((n) => {
      const inCode = n.parentNode.closest && n.parentNode.closest('code, pre');
      const parts = n.nodeValue.split(/%%MATH(\d+)%%/);
      const frag = document.createDocumentFragment();
      parts.forEach((p, i) => {
        if (i % 2 === 0) { if (p) frag.appendChild(document.createTextNode(p)); return; }
        const tex = math[+p];
        if (tex === undefined || inCode) { frag.appendChild(document.createTextNode(tex || '')); return; }
        let body = tex, display = false;
        if (tex.startsWith('$$')) { body = tex.slice(2, -2); display = true; }
        else if (tex.startsWith('\\[')) { body = tex.slice(2, -2); display = true; }
        else if (tex.startsWith('\\(')) body = tex.slice(2, -2);
        else body = tex.slice(1, -1);
        const span = document.createElement(display ? 'div' : 'span');
        span.className = 'math';
        try {
          /* KaTeX escapes its input; trust stays off (no \href, \htmlClass, ...) */
          span.innerHTML = DOMPurify.sanitize(katex.renderToString(body, { displayMode: display, throwOnError: false, trust: false }));
        } catch (e) { span.textContent = tex; }
        frag.appendChild(span);
      });
      n.parentNode.replaceChild(frag, n);
    });
  }

  /* ---- conversations -------------------------------------------------------------------- */

  function uid() { return Date.now().toString(36) + Math.random().toString(36).slice(2, 8); }
  function cur() { return convs.find((c) => c.id === curId) || null; }
  function persist() {
    try { save(LS.convs, convs); } catch (e) { console.warn('cinfer: could not save conversations', e); }
    save(LS.cur, curId);
  }
  function newConv() {
    const c = { id: uid(), title: 'New chat', system: settings.system || '', messages: [], updated: Date.now() };
    convs.unshift(c);
    curId = c.id;
    persist();
    return c;
  }
  function ensureConv() { return cur() || newConv(); }

  function renderList() {
    const ul = $('conv-list');
    ul.textContent = '';
    convs.forEach((c) => {
      const li = document.createElement('li');
      li.className = c.id === curId ? 'active' : '';
      li.dataset.id = c.id;
      const t = document.createElement('span');
      t.className = 'title';
      t.textContent = c.title || 'Untitled';
      t.onclick = () => { if (busy) return; curId = c.id; persist(); renderAll(); closeSidebar(); };
      const ren = document.createElement('button');
      ren.className = 'icon small rename'; ren.title = 'Rename'; ren.textContent = '\u270E';
      ren.onclick = () => {
        const n = prompt('Rename conversation', c.title);
        if (n != null && n.trim()) { c.title = n.trim(); persist(); renderList(); }
      };
      const del = document.createElement('button');
      del.className = 'icon small delete'; del.title = 'Delete'; del.textContent = '\u00D7';
      del.onclick = () => {
        if (busy && busy.conv === c) return;
        if (!confirm('Delete "' + c.title + '"?')) return;
        convs = convs.filter((x) => x !== c);
        if (curId === c.id) curId = convs.length ? convs[0].id : null;
        persist(); renderAll();
      };
      li.append(t, ren, del);
      ul.appendChild(li);
    });
  }

  function download(name, obj) {
    const a = document.createElement('a');
    a.href = URL.createObjectURL(new Blob([JSON.stringify(obj, null, 2)], { type: 'application/json' }));
    a.download = name;
    document.body.appendChild(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  }

  /* ---- messages ------------------------------------------------------------------------- */

  function fmtStats(s) {
    if (!s) return '';
    const p = [];
    if (s.completion != null) p.push(s.completion + ' tokens');
    if (s.tps != null) p.push(s.tps.toFixed(1) + ' tok/s');
    if (s.ttft != null) p.push('TTFT ' + Math.round(s.ttft) + ' ms');
    if (s.prompt != null) p.push('prompt ' + s.prompt);
    if (s.cached != null) p.push('cached ' + s.cached);
    if (s.finish) p.push(s.finish);
    return p.join(' \u00B7 ');
  }

  function msgEl(c, m, idx) {
    const div = document.createElement('div');
    div.className = 'msg ' + m.role;
    div.dataset.idx = idx;
    if (m.role === 'tool') {
      const d = document.createElement('details');
      d.className = 'tool-result';
      const s = document.createElement('summary');
      s.textContent = 'Tool result' + (m.name ? ' (' + m.name + ')' : '');
      const pre = document.createElement('pre'); pre.textContent = m.content;
      d.append(s, pre); div.appendChild(d);
      return div;
    }
    if (m.reasoning) {
      const d = document.createElement('details');
      d.className = 'reasoning';
      /* open while it streams, folded after; a reader's own click wins */
      d.open = m.openReasoning !== undefined ? m.openReasoning : !!m.streaming && !m.content;
      const s = document.createElement('summary');
      s.addEventListener('click', () => { m.openReasoning = !d.open; });
      s.textContent = m.streaming && !m.content ? 'Thinking\u2026' : 'Reasoning';
      const body = document.createElement('div');
      body.className = 'md';
      renderMarkdown(m.reasoning, body, m.streaming);
      d.append(s, body); div.appendChild(d);
    }
    const body = document.createElement('div');
    body.className = 'md body';
    if (m.role === 'user') body.textContent = m.content; else renderMarkdown(m.content || '', body, m.streaming);
    div.appendChild(body);
    (m.tool_calls || []).forEach((tc, i) => div.appendChild(toolCallEl(c, m, tc, i)));
    if (m.error) {
      const e = document.createElement('div'); e.className = 'error'; e.textContent = m.error; div.appendChild(e);
    }
    const foot = document.createElement('div');
    foot.className = 'foot';
    const st = document.createElement('span');
    st.className = 'stats';
    st.textContent = fmtStats(m.stats);
    foot.appendChild(st);
    if (!m.streaming) foot.append(...actions(c, m, idx));
    div.appendChild(foot);
    return div;
  }

  function toolCallEl(c, m, tc, i) {
    const box = document.createElement('div');
    box.className = 'tool-call';
    const h = document.createElement('div');
    h.className = 'tool-name';
    h.textContent = 'tool call \u2192 ' + ((tc.function && tc.function.name) || '?');
    const pre = document.createElement('pre');
    let args = (tc.function && tc.function.arguments) || '';
    try { args = JSON.stringify(JSON.parse(args), null, 2); } catch (e) { /* partial */ }
    pre.textContent = args;
    box.append(h, pre);
    const answered = c.messages.some((x) => x.role === 'tool' && x.tool_call_id === tc.id);
    if (!m.streaming && !answered && c.messages[c.messages.length - 1] === m) {
      const f = document.createElement('form');
      f.className = 'tool-reply';
      const inp = document.createElement('input');
      inp.placeholder = 'Result to send back';
      const b = document.createElement('button');
      b.textContent = 'Send result';
      f.append(inp, b);
      f.onsubmit = (ev) => {
        ev.preventDefault();
        if (busy) return;
        c.messages.push({ role: 'tool', tool_call_id: tc.id, name: tc.function && tc.function.name, content: inp.value });
        const pending = (m.tool_calls || []).filter((t) => !c.messages.some((x) => x.role === 'tool' && x.tool_call_id === t.id));
        persist();
        if (pending.length) renderMessages(); else generate(c);
      };
      box.appendChild(f);
    }
    return box;
  }

  function button(label, cls, fn) {
    const b = document.createElement('button');
    b.type = 'button'; b.className = 'act ' + cls; b.textContent = label; b.onclick = fn;
    return b;
  }

  function actions(c, m, idx) {
    const out = [];
    const raw = m.content || '';
    out.push(button('Copy', 'copy-msg', (ev) => copyText(raw, ev.target)));
    if (m.role === 'user') {
      out.push(button('Edit', 'edit', () => editMessage(c, idx)));
      out.push(button('Resend', 'resend', () => { if (busy) return; c.messages.length = idx + 1; persist(); generate(c); }));
    } else if (m.role === 'assistant' && idx === c.messages.length - 1) {
      out.push(button('Regenerate', 'regenerate', () => { if (busy) return; c.messages.length = idx; persist(); generate(c); }));
    }
    return out;
  }

  function editMessage(c, idx) {
    if (busy) return;
    const el = document.querySelector('.msg[data-idx="' + idx + '"]');
    const body = el.querySelector('.body');
    const ta = document.createElement('textarea');
    ta.className = 'edit-box'; ta.value = c.messages[idx].content; ta.rows = 4;
    const ok = button('Save & send', 'save-edit', () => {
      c.messages[idx].content = ta.value;
      c.messages.length = idx + 1;
      persist(); generate(c);
    });
    const cancel = button('Cancel', 'cancel-edit', () => renderMessages());
    body.replaceWith(ta);
    el.querySelector('.foot').replaceChildren(ok, cancel);
    ta.focus();
  }

  function renderMessages() {
    const c = cur();
    const box = $('messages');
    box.textContent = '';
    if (!c || !c.messages.length) {
      const e = document.createElement('div');
      e.className = 'empty';
      e.textContent = modelInfo ? 'Chat with ' + modelInfo.id : 'Start a conversation';
      box.appendChild(e);
      return;
    }
    c.messages.forEach((m, i) => box.appendChild(msgEl(c, m, i)));
    box.scrollTop = box.scrollHeight;
  }

  function renderAll() {
    const c = cur();
    $('sys-prompt').value = c ? c.system || '' : settings.system || '';
    renderList(); renderMessages();
  }

  /* ---- generation ----------------------------------------------------------------------- */

  function requestBody(c) {
    const msgs = [];
    if (c.system && c.system.trim()) msgs.push({ role: 'system', content: c.system });
    c.messages.forEach((m) => {
      if (m.role === 'tool') msgs.push({ role: 'tool', tool_call_id: m.tool_call_id, content: m.content });
      else if (m.role === 'assistant') {
        const o = { role: 'assistant', content: m.content || '' };
        if (m.tool_calls && m.tool_calls.length) o.tool_calls = m.tool_calls;
        msgs.push(o);
      } else msgs.push({ role: m.role, content: m.content });
    });
    const b = { messages: msgs, stream: true, stream_options: { include_usage: true } };
    if (modelInfo) b.model = modelInfo.id;
    ['temperature', 'top_p'].forEach((k) => { if (settings[k] !== undefined && settings[k] !== '') b[k] = +settings[k]; });
    if (settings.max_tokens) b.max_tokens = +settings.max_tokens;
    if (settings.thinking === 'on' || settings.thinking === 'off') b.chat_template_kwargs = { enable_thinking: settings.thinking === 'on' };
    if (settings.tools) { try { b.tools = JSON.parse(settings.tools); } catch (e) { /* checked on save */ } }
    return b;
  }

  function setBusy(on) {
    $('send').hidden = on; $('stop').hidden = !on;
    document.body.classList.toggle('busy', on);
  }

  async function generate(c) {
    const body = JSON.stringify(requestBody(c));
    const m = { role: 'assistant', content: '', reasoning: '', streaming: true, stats: null };
    c.messages.push(m);
    c.updated = Date.now();
    const ctrl = new AbortController();
    busy = { ctrl, conv: c };
    setBusy(true);
    renderMessages();
    const t0 = performance.now();
    let tFirst = null, usage = null, finish = null;
    let pending = false;
    const box = $('messages');
    const redraw = () => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => {
        pending = false;
        if (cur() !== c) return;
        const old = box.lastElementChild;
        const el = msgEl(c, m, c.messages.length - 1);
        const stick = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
        if (old && old.classList.contains('assistant')) old.replaceWith(el); else box.appendChild(el);
        if (stick) box.scrollTop = box.scrollHeight;
      });
    };
    try {
      const r = await api('/v1/chat/completions', {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body, signal: ctrl.signal,
      });
      if (!r.ok) {
        let msg = 'HTTP ' + r.status;
        try { const j = await r.json(); if (j.error && j.error.message) msg += ': ' + j.error.message; } catch (e) { /* not JSON */ }
        throw new Error(msg);
      }
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let k;
        while ((k = buf.indexOf('\n\n')) >= 0) {
          const frame = buf.slice(0, k); buf = buf.slice(k + 2);
          frame.split('\n').forEach((line) => {
            if (!line.startsWith('data:')) return;
            const data = line.slice(5).trim();
            if (data === '[DONE]') return;
            let j;
            try { j = JSON.parse(data); } catch (e) { return; }
            if (j.error) throw new Error(j.error.message || 'server error');
            if (j.usage) usage = j.usage;
            const ch = j.choices && j.choices[0];
            if (!ch) return;
            const d = ch.delta || {};
            const rs = d.reasoning_content || d.reasoning;
            if (rs) m.reasoning += rs;
            if (d.content) m.content += d.content;
            if (d.tool_calls) {
              m.tool_calls = m.tool_calls || [];
              d.tool_calls.forEach((t) => {
                const i = t.index || 0;
                const tc = m.tool_calls[i] || (m.tool_calls[i] = { id: t.id, type: 'function', function: { name: '', arguments: '' } });
                if (t.id) tc.id = t.id;
                if (t.function && t.function.name) tc.function.name += t.function.name;
                if (t.function && t.function.arguments) tc.function.arguments += t.function.arguments;
              });
            }
            if ((rs || d.content || d.tool_calls) && tFirst === null) tFirst = performance.now();
            if (ch.finish_reason) finish = ch.finish_reason;
          });
          redraw();
        }
      }
    } catch (e) {
      if (e.name === 'AbortError') finish = 'stopped';
      else m.error = String(e.message || e);
    }
    const tEnd = performance.now();
    m.streaming = false;
    const st = { finish: finish || undefined };
    if (tFirst !== null) st.ttft = tFirst - t0;
    if (usage) {
      st.completion = usage.completion_tokens; st.prompt = usage.prompt_tokens;
      st.cached = usage.prompt_tokens_details ? usage.prompt_tokens_details.cached_tokens : undefined;
      if (tFirst !== null && usage.completion_tokens > 1 && tEnd > tFirst) st.tps = (usage.completion_tokens - 1) / ((tEnd - tFirst) / 1000);
    }
    m.stats = st;
    if (!m.reasoning) delete m.reasoning;
    busy = null;
    setBusy(false);
    persist();
    if (cur() === c) renderMessages();
    renderList();
  }

  function send() {
    if (busy) return;
    const text = $('input').value;
    if (!text.trim()) return;
    const c = ensureConv();
    c.system = $('sys-prompt').value;
    c.messages.push({ role: 'user', content: text });
    if (c.title === 'New chat') c.title = text.trim().split('\n')[0].slice(0, 48);
    $('input').value = '';
    persist();
    renderList();
    generate(c);
  }

  /* ---- status view ---------------------------------------------------------------------- */

  const hist = [];   /* {t, gen, hits, misses} samples, last 10 minutes */
  let statusTimer = null;

  function gb(b) { return b == null ? '\u2013' : (b / 1e9).toFixed(2) + ' GB'; }
  function card(title, rows) {
    const s = document.createElement('div');
    s.className = 'card';
    const h = document.createElement('h4'); h.textContent = title; s.appendChild(h);
    const dl = document.createElement('dl');
    rows.forEach(([k, v]) => {
      const dt = document.createElement('dt'); dt.textContent = k;
      const dd = document.createElement('dd'); dd.textContent = v == null ? '\u2013' : String(v);
      dd.dataset.key = k;
      dl.append(dt, dd);
    });
    s.appendChild(dl);
    return s;
  }

  function drawChart(canvas, pts, fmt) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || 600, h = canvas.clientHeight || 160;
    canvas.width = w * dpr; canvas.height = h * dpr;
    const g = canvas.getContext('2d');
    g.scale(dpr, dpr);
    const css = getComputedStyle(document.body);
    g.clearRect(0, 0, w, h);
    g.strokeStyle = css.getPropertyValue('--border'); g.lineWidth = 1;
    g.strokeRect(0.5, 0.5, w - 1, h - 1);
    const vals = pts.filter((p) => p.v != null);
    const max = Math.max(1e-9, ...vals.map((p) => p.v));
    const now = Date.now(), span = 10 * 60 * 1000;
    g.fillStyle = css.getPropertyValue('--muted'); g.font = '11px system-ui, sans-serif';
    g.fillText(fmt(max), 4, 12);
    g.fillText('-10 min', 4, h - 4);
    if (!vals.length) return;
    g.strokeStyle = css.getPropertyValue('--accent'); g.lineWidth = 2;
    g.beginPath();
    vals.forEach((p, i) => {
      const x = w - ((now - p.t) / span) * w, y = h - 16 - (p.v / max) * (h - 32);
      if (i) g.lineTo(x, y); else g.moveTo(x, y);
    });
    g.stroke();
  }

  async function pollStatus() {
    let s, health = '\u2013';
    try {
      const [rs, rh] = await Promise.all([api('/stats'), fetch('/health')]);
      if (!rs.ok) throw new Error('/stats answered HTTP ' + rs.status);
      s = await rs.json();
      health = rh.ok ? 'ok' : 'HTTP ' + rh.status;
      $('status-error').hidden = true;
    } catch (e) {
      $('status-error').textContent = 'Cannot reach the server: ' + e.message;
      $('status-error').hidden = false;
      return;
    }
    const t = Date.now();
    hist.push({ t, gen: s.tokens ? s.tokens.generated : 0, hits: s.prompt_cache.hits, misses: s.prompt_cache.misses });
    while (hist.length && t - hist[0].t > 10 * 60 * 1000) hist.shift();
    for (let i = 1; i < hist.length; i++) {
      /* rates over the last ~10 s (5 polls), so one busy poll does not spike the chart */
      const a = hist[Math.max(0, i - 5)], b = hist[i], dt = (b.t - a.t) / 1000;
      b.tps = dt > 0 ? (b.gen - a.gen) / dt : null;
      const dh = b.hits - a.hits, dm = b.misses - a.misses;
      b.hit = dh + dm > 0 ? dh / (dh + dm) : null;
    }
    const r = hist.length > 1 ? hist[hist.length - 1] : { tps: null };
    const pc = s.prompt_cache, ad = s.admission, ba = s.batch, rq = s.requests;
    const total = pc.hits + pc.misses;
    const cards = [
      card('Model', [['model', s.server.model], ['backend', (s.server.backend || (ad.memory === 'device' ? 'GPU' : 'CPU')) + (ad.memory === 'device' ? ' (device memory)' : ' (host memory)')],
        ['health', health], ['uptime', Math.round(s.server.uptime_s) + ' s'], ['connections', s.server.connections],
        ['context', modelInfo ? modelInfo.context_window : ad.max_safe_context]]),
      card('Memory plan', [['budget', gb(ad.budget_bytes)], ['weights', gb(ad.weights_bytes)], ['transient', gb(ad.transient_bytes)],
        ['KV in use', gb(ba.kv_bytes)], ['max safe context', ad.max_safe_context],
        ['blocks free', ba.blocks_free + ' / ' + ba.blocks_total]]),
      card('Prompt cache', [['hit rate', total ? (100 * pc.hits / total).toFixed(1) + ' %' : '\u2013'], ['hits', pc.hits], ['misses', pc.misses],
        ['hit tokens', pc.hit_tokens], ['entries', pc.entries], ['size', gb(pc.bytes) + ' of ' + gb(pc.max_bytes)]]),
      card('Batch', [['mode', ba.mode + ' (' + ba.configured + ' rows)'], ['running rows', ba.active_rows], ['queued', ba.pending_rows],
        ['steps', ba.steps], ['tokens/s now', r.tps == null ? '\u2013' : r.tps.toFixed(1)], ['generated', s.tokens.generated]]),
      card('Requests', [['chat', rq.chat], ['completions', rq.completions], ['finished', rq.finished], ['cancelled', rq.cancelled],
        ['failed', rq.failed], ['streams open', rq.streams_open]]),
    ];
    $('status-cards').replaceChildren(...cards);
    $('stats-raw').textContent = JSON.stringify(s, null, 2);
    document.body.dataset.statsPolls = String((+document.body.dataset.statsPolls || 0) + 1);
    drawChart($('chart-tps'), hist.map((p) => ({ t: p.t, v: p.tps })), (v) => v.toFixed(1) + ' tok/s');
    drawChart($('chart-cache'), hist.map((p) => ({ t: p.t, v: p.hit == null ? null : 100 * p.hit })), (v) => v.toFixed(0) + ' %');
  }

  function startStatus() {
    if (statusTimer) return;
    pollStatus();
    statusTimer = setInterval(pollStatus, 2000);
  }
  function stopStatus() { clearInterval(statusTimer); statusTimer = null; }

  /* ---- routing, settings, wiring -------------------------------------------------------- */

  function route() {
    const status = location.hash === '#/status';
    $('chat-view').hidden = status;
    $('sidebar').hidden = status;
    $('status-view').hidden = !status;
    $('nav-chat').classList.toggle('on', !status);
    $('nav-status').classList.toggle('on', status);
    if (status) startStatus(); else { stopStatus(); $('input').focus(); }
  }

  function closeSidebar() { document.body.classList.remove('side-open'); }

  function openSettings() {
    ['temperature', 'top_p', 'max_tokens'].forEach((k) => ($('set-' + k).value = settings[k] == null ? '' : settings[k]));
    $('set-thinking').value = settings.thinking || '';
    $('set-tools').value = settings.tools || '';
    $('set-api-key').value = apiKey;
    $('settings-dlg').showModal();
  }
  function saveSettings() {
    ['temperature', 'top_p', 'max_tokens'].forEach((k) => {
      const v = $('set-' + k).value;
      if (v === '') delete settings[k]; else settings[k] = +v;
    });
    settings.thinking = $('set-thinking').value;
    const tools = $('set-tools').value.trim();
    if (tools) {
      try { if (!Array.isArray(JSON.parse(tools))) throw new Error('not an array'); settings.tools = tools; $('tools-error').hidden = true; }
      catch (e) { $('tools-error').textContent = 'Tools must be a JSON array: ' + e.message; $('tools-error').hidden = false; return false; }
    } else delete settings.tools;
    apiKey = $('set-api-key').value.trim();
    localStorage.setItem(LS.key, apiKey);
    save(LS.set, settings);
    return true;
  }

  async function loadModel() {
    try {
      const r = await api('/v1/models');
      if (!r.ok) return;
      const j = await r.json();
      modelInfo = j.data && j.data[0];
      if (modelInfo) {
        $('model-name').textContent = modelInfo.id;
        document.title = 'cinfer \u00B7 ' + modelInfo.id;
        if (!modelInfo.reasoning) $('set-thinking').disabled = true;
      }
      if (!cur() || !cur().messages.length) renderMessages();
    } catch (e) { console.warn('cinfer: /v1/models', e); }
  }

  function init() {
    $('composer').onsubmit = (ev) => { ev.preventDefault(); send(); };
    $('input').addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); send(); }
    });
    $('stop').onclick = () => { if (busy) busy.ctrl.abort(); };
    $('new-chat').onclick = () => { if (busy) return; newConv(); renderAll(); closeSidebar(); $('input').focus(); };
    $('sys-prompt').addEventListener('change', () => {
      const c = ensureConv(); c.system = $('sys-prompt').value; settings.system = c.system; save(LS.set, settings); persist(); renderList();
    });
    $('menu-btn').onclick = () => document.body.classList.toggle('side-open');
    $('settings-btn').onclick = openSettings;
    $('settings-form').addEventListener('submit', (ev) => {
      if (ev.submitter && ev.submitter.value === 'ok' && !saveSettings()) ev.preventDefault();
    });
    $('export-conv').onclick = () => { const c = cur(); if (c) download('cinfer-chat-' + c.id + '.json', c); };
    $('export-all').onclick = () => download('cinfer-chats.json', convs);
    window.addEventListener('hashchange', route);
    if (!location.hash || (location.hash !== '#/chat' && location.hash !== '#/status')) history.replaceState(null, '', '#/chat');
    if (!cur() && convs.length) curId = convs[0].id;
    renderAll();
    route();
    loadModel();
  }

  init();
})();
