'use strict';
// robo_rl intervention GUI, browser side.
// Speaks JSON over /ws, re-renders each state snapshot in place and forwards keys to the server,
// which owns the key table (the page never maps keys to commands itself).

const V = 1, HEARTBEAT_MS = 250, RECONNECT_MS = 1000, MAX_MESSAGES = 6;
const RATE_WINDOW = 10;      // episodes in the running means of the rates plot
const RECENT_SLOTS = 50;     // width of the recent-episodes strip, in episodes
const MODE_WORD = { POLICY: 'POLICY', HUMAN: 'HUMAN', PAUSED: 'PAUSED', ESTOP: 'E-STOP', SAFETY: 'SAFETY STOP' };
const BUTTONS = [
  ['intervention_toggle', 'Intervene'], ['success', 'Success'], ['failure', 'Failure'],
  ['rerecord_episode', 'Re-record'], ['pause', 'Pause'], ['estop', 'E-STOP'], ['acknowledge', 'Acknowledge'],
];
const LEARNER_FIELDS = ['env_steps', 'updates', 'updates_per_s', 'realised_utd', 'staleness_versions', 'buffer', 'actors_alive'];
const PREVENT_KEYS = new Set(['ArrowUp', 'ArrowDown', 'ArrowLeft', 'ArrowRight', ' ', 'PageUp', 'PageDown', 'Backspace', 'Enter']);
const KEY_LABELS = {
  up: '↑', down: '↓', left: '←', right: '→', space: 'Space', enter: 'Enter', backspace: 'Backspace',
  esc: 'Esc', page_up: 'PgUp', page_down: 'PgDn',
};
const C = {
  policy: '#2e9d4a', human: '#e8871e', success: '#3ccf66', failure: '#e04848',
  grid: '#2f3644', text: '#9aa3b2', reward: '#5fa8ff', rewardNeg: '#e06060',
};

// ---------------------------------------------------------------- helpers

const $ = (sel, root = document) => root.querySelector(sel);
const isNum = (x) => typeof x === 'number' && Number.isFinite(x);
const arr = (x) => (Array.isArray(x) ? x : []);

// a chunked policy's figures (policies/chunking.py): how its chunks are computed, their inference, the delay the
// loop compensates, the steps the robot waited for a chunk, and the chunk switches
function chunkText(loop) {
  if (typeof loop.chunking !== 'string' || !isNum(loop.chunk_switches)) return '';
  const ms = isNum(loop.chunk_inference_ms_p99) ? ` ${loop.chunk_inference_ms_p99.toFixed(0)} ms p99,` : '';
  return ` · chunks ${loop.chunking}:${ms} delay ${fmt(loop.chunk_delay_steps)} steps, ` +
    `${fmt(loop.chunk_waits)} waits, ${fmt(loop.chunk_switches)} switches`;
}

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'class') node.className = v;
    else if (k === 'text') node.textContent = v;
    else if (k.startsWith('data-')) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) if (c != null) node.append(c);
  return node;
}

// Only touch the DOM when the text really changed (leaf nodes only).
const setText = (node, text) => { if (node.textContent !== text) node.textContent = text; };
const fmt = (x, digits = 2) => (!isNum(x) ? '—' : Number.isInteger(x) ? String(x) : x.toFixed(digits));
const keyLabel = (name) => KEY_LABELS[name] || (name.length === 1 ? name.toUpperCase() : name);

function operatorName() {
  const fromQuery = new URLSearchParams(location.search).get('name');
  try {
    if (fromQuery) { localStorage.setItem('robo_rl_operator', fromQuery); return fromQuery; }
    return localStorage.getItem('robo_rl_operator') || 'operator';
  } catch { return fromQuery || 'operator'; }  // storage may be blocked
}

// ---------------------------------------------------------------- state of the page

let ws = null, heartbeat = null, reconnectTimer = null;
let keyTable = {};            // key name -> binding, from the welcome
let myName = null, selectedId = null;
const rows = new Map();       // actor id -> row (DOM nodes + last drawn signatures)
const held = new Map();       // KeyboardEvent.code -> {key, actor} of keys sent down and not yet up

// ---------------------------------------------------------------- connection

function connect() {
  reconnectTimer = null;
  const url = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/ws' + location.search;
  let sock;
  try { sock = new WebSocket(url); } catch { onClosed(null); return; }
  ws = sock;
  sock.onopen = () => {
    setConn(true);
    send({ type: 'hello', name: operatorName() });
    clearInterval(heartbeat);
    heartbeat = setInterval(() => send({ type: 'heartbeat' }), HEARTBEAT_MS);
  };
  sock.onmessage = (ev) => {
    let msg;
    try { msg = JSON.parse(ev.data); } catch { return; }
    if (msg && typeof msg === 'object') handleMessage(msg);
  };
  sock.onerror = () => setConn(false);   // a close event follows and reconnects
  sock.onclose = () => onClosed(sock);
}

function onClosed(sock) {
  if (sock && sock !== ws) return;
  ws = null;
  clearInterval(heartbeat);
  held.clear();                          // the server forgets this page's keys with its connection
  setConn(false);
  if (!reconnectTimer) reconnectTimer = setTimeout(connect, RECONNECT_MS);
}

function send(obj) {
  if (!ws || ws.readyState !== WebSocket.OPEN) return false;
  ws.send(JSON.stringify({ v: V, ...obj }));
  return true;
}

function setConn(ok) {
  setText($('#conn'), ok ? 'connected' : 'disconnected');
  $('#conn').className = ok ? 'ok' : 'bad';
  document.body.classList.toggle('disconnected', !ok);
}

function handleMessage(msg) {                 // unknown types are ignored
  if (msg.type === 'welcome') onWelcome(msg);
  else if (msg.type === 'state') onState(msg);
  else if (msg.type === 'refused') addMessage('refused', `${msg.command || 'command'} refused: ${msg.reason || '(no reason)'}`);
  else if (msg.type === 'error') addMessage('error', String(msg.reason ?? 'error'));
  else if (msg.type === 'info') addMessage('info', String(msg.text ?? ''));
}

function addMessage(kind, text) {
  const box = $('#messages');
  const time = new Date().toLocaleTimeString([], { hour12: false });
  box.prepend(el('div', { class: 'msg ' + kind },
    el('span', { class: 'msg-time', text: time + ' ' }), el('span', { class: 'msg-text', text })));
  while (box.children.length > MAX_MESSAGES) box.lastElementChild.remove();
}

// ---------------------------------------------------------------- welcome: operator, dead-man, keys

function onWelcome(msg) {
  keyTable = msg.keys && typeof msg.keys === 'object' ? msg.keys : {};
  myName = msg.name != null ? String(msg.name) : operatorName();
  setText($('#operator'), myName);
  const dm = { pause: 'pause', estop: 'e-stop' }[msg.deadman]
    || (msg.deadman === null ? 'pause on a robot, carry on in a simulator' : msg.deadman ? 'carry on' : null);
  setText($('#deadman'), dm ? `if this page disconnects: ${dm}` : '');
  // Key help: one entry per binding, listing every key bound to it.
  const byBinding = new Map();
  for (const [key, b] of Object.entries(keyTable)) if (b != null) byBinding.set(b, [...(byBinding.get(b) || []), key]);
  $('#keys-help').replaceChildren(...[...byBinding].map(([binding, keys]) => el('span', { class: 'kh' },
    ...keys.map((k) => el('kbd', { text: keyLabel(k) })),
    el('span', { class: 'kh-what', text: String(binding).replace(/_/g, ' ') }))));
  for (const r of rows.values()) updateShortcuts(r);
}

// Each button shows the (first) key bound to its command.
function updateShortcuts(r) {
  for (const [cmd] of BUTTONS) {
    const key = Object.keys(keyTable).find((k) => keyTable[k] === cmd);
    setText(r.kbd[cmd], key === undefined ? '' : keyLabel(key));
  }
}

// ---------------------------------------------------------------- state snapshots

function onState(msg) {
  const present = new Set(), drawn = [];
  for (const a of arr(msg.actors)) {
    if (!a || typeof a !== 'object' || a.id == null) continue;
    const id = String(a.id);
    present.add(id);
    let r = rows.get(id);
    if (!r) { r = createRow(id); rows.set(id, r); }
    try { updateRow(r, a); drawn.push([r, a]); } catch (err) { console.warn('actor', id, err); }
  }
  for (const [id, r] of rows) if (!present.has(id)) setOffline(r, true, null);
  if ((selectedId === null || !rows.has(selectedId)) && rows.size) select(rows.keys().next().value);
  // Canvases after all text updates, so layout is computed once.
  for (const [r, a] of drawn) drawCharts(r, a);
  if (typeof updateChecks === 'function') {   // checks.js: scores, threshold, marks, resets, the queue
    for (const [r, a] of drawn) { try { updateChecks(r, a); } catch (err) { console.warn('checks', r.id, err); } }
    updateQueue(msg.queue);
  }
  updateLearner(msg.learner);
  const sel = rows.get(selectedId);
  if (sel) document.title = `${sel.mode.textContent.split(' ·')[0]} · ${selectedId} — robo_rl`;
}

function updateLearner(learner) {
  const L = learner && typeof learner === 'object' ? learner : {};
  for (const f of LEARNER_FIELDS) {
    const node = $(`#learner [data-field="${f}"]`);
    if (!node) continue;
    const buf = f === 'buffer' && L.buffer && typeof L.buffer === 'object' ? Object.entries(L.buffer) : [];
    if (f !== 'buffer') setText(node, fmt(L[f]));
    else setText(node, buf.length ? buf.map(([k, n]) => `${k} ${fmt(n)}`).join(' · ') : '—');
  }
}

function select(id) {
  selectedId = id;
  for (const [rid, r] of rows) r.root.classList.toggle('selected', rid === id);
}

function createRow(id) {
  const r = { id, tiles: new Map(), sig: {}, labels: {}, kbd: {} };
  const stat = (label, cls) => {
    r[cls] = el('span', { class: 'stat-value ' + cls, text: '—' });
    return el('div', { class: 'stat' }, el('span', { class: 'stat-label', text: label }), r[cls]);
  };
  const [marker, mode, camBox, viewBox, ratesText, loop, notice, safety, rewardCv, timelineCv, ratesCv] = [
    ['span', 'offline-marker'], ['div', 'mode'], ['div', 'cams'], ['div', 'cams view-box'], ['div', 'rates-text'],
    ['div', 'loop'], ['div', 'notice'], ['div', 'safety'], ['canvas', 'reward-trace'], ['canvas', 'timeline'],
    ['canvas', 'rates'],
  ].map(([tag, cls]) => el(tag, { class: cls }));
  Object.assign(r, { marker, mode, camBox, viewBox, ratesText, loop, notice, safety, rewardCv, timelineCv, ratesCv });
  const buttons = el('div', { class: 'buttons' });
  for (const [cmd, label] of BUTTONS) {
    r.labels[cmd] = el('span', { class: 'label', text: label });
    r.kbd[cmd] = el('kbd', { class: 'shortcut' });
    const b = el('button', { type: 'button', 'data-command': cmd }, r.labels[cmd], r.kbd[cmd]);
    b.addEventListener('mousedown', (e) => e.preventDefault());   // never take keyboard focus
    b.addEventListener('click', (e) => {
      e.stopPropagation();
      select(id);
      if (!send({ type: 'command', actor: id, command: cmd })) addMessage('error', `not connected: ${cmd} not sent`);
      b.blur();
    });
    buttons.append(b);
  }
  r.root = el('div', { class: 'actor', 'data-actor': id },
    el('div', { class: 'actor-head' },
      el('div', { class: 'actor-id' }, el('span', { class: 'id-text', text: id }), r.marker), r.mode),
    el('div', { class: 'actor-main' },
      r.camBox, r.viewBox,
      el('div', { class: 'actor-info' },
        el('div', { class: 'stats' },
          stat('episode', 'episode'), stat('step', 'step'), stat('return', 'return'), stat('P(success)', 'success-prob')),
        r.ratesText, r.loop, r.notice, r.safety),
      el('div', { class: 'plots' }, r.rewardCv, r.timelineCv, r.ratesCv)),
    buttons);
  r.root.addEventListener('click', () => select(id));
  updateShortcuts(r);
  $('#actors .placeholder')?.remove();
  $('#actors').append(r.root);
  return r;
}

function setOffline(r, off, lastSeen) {
  r.root.classList.toggle('offline', off);
  setText(r.marker, off ? (isNum(lastSeen) ? `offline · ${lastSeen.toFixed(0)} s` : 'offline') : '');
}

function policyText(a) {
  if (!isNum(a.policy_version) || a.policy_version < 0) return 'untrained';
  return `v${a.policy_version}` + (isNum(a.policy_age_s) ? `, ${a.policy_age_s.toFixed(1)} s old` : '');
}

// "HUMAN · web (alice)", "POLICY · v12, 3.2 s old", "PAUSED · policy untrained", "E-STOP".
function modeText(a) {
  const word = MODE_WORD[a.mode] || (a.mode ? String(a.mode) : 'UNKNOWN');
  let detail = '';
  if (a.mode === 'HUMAN') detail = (a.controller ? String(a.controller) : 'human') + (a.holder ? ` (${a.holder})` : '');
  else if (a.mode === 'POLICY') detail = policyText(a);
  else if (a.mode === 'PAUSED') detail = `policy ${policyText(a)}`;
  return detail ? `${word} · ${detail}` : word;
}

// The safety layer's line: why the arm is stopped, or what it clipped on the last step, with its running counts.
function safetyText(a) {
  const counts = a.safety_counts && typeof a.safety_counts === 'object' ? a.safety_counts : {};
  const shown = ['workspace', 'translation_m', 'rotation_rad', 'joint_limits', 'joint_speed', 'refused', 'stop',
    'watchdog_hold_s'].filter((k) => isNum(counts[k]) && counts[k] > 0).map((k) => `${k} ${counts[k]}`);
  const line = typeof a.safety === 'string' ? a.safety : '';
  if (!line && !shown.length) return '';
  return `safety: ${line}${line && shown.length ? ' · ' : ''}${shown.length ? 'counts: ' + shown.join(', ') : ''}`;
}

function updateRow(r, a) {
  setOffline(r, a.alive === false, a.last_seen_s);
  const modeClass = MODE_WORD[a.mode] ? `mode mode-${a.mode}` : 'mode';
  if (r.mode.className !== modeClass) r.mode.className = modeClass;
  setText(r.mode, modeText(a));
  r.root.classList.toggle('mine', myName !== null && a.holder === myName);
  setText(r.episode, fmt(a.episode));
  setText(r.step, fmt(a.step));
  setText(r.return, isNum(a.return) ? a.return.toFixed(2) : '—');
  setText(r['success-prob'], isNum(a.success_prob) ? `${(a.success_prob * 100).toFixed(0)}%` : '—');
  const n = arr(a.recent).length;
  const sr = isNum(a.success_rate) ? a.success_rate.toFixed(2) : '—';
  const ir = isNum(a.intervention_rate) ? `${(a.intervention_rate * 100).toFixed(1)}%` : '—';
  setText(r.ratesText, `success ${sr} · interventions ${ir} (last ${n} episode${n === 1 ? '' : 's'})`);
  const loop = a.loop && typeof a.loop === 'object' ? a.loop : {};
  const late = isNum(loop.late_decide_ms) && isNum(loop.late_env_ms) && isNum(loop.late_woke_late_ms)
    ? ` (slowest 1%: policy ${loop.late_decide_ms.toFixed(0)}, env ${loop.late_env_ms.toFixed(0)}`
      + (isNum(loop.late_env_cpu_ms) ? ` of which CPU ${loop.late_env_cpu_ms.toFixed(0)}` : '')
      + `, woke late ${loop.late_woke_late_ms.toFixed(0)} ms)`
    : '';
  const jitter = isNum(loop.jitter_ms_p99) ? ` · jitter ${loop.jitter_ms_p99.toFixed(1)} ms p99${late}` : '';
  setText(r.loop, isNum(loop.period_ms_p50) ? `loop ${loop.period_ms_p50.toFixed(1)} ms p50${jitter}${chunkText(loop)}` : '');
  setText(r.notice, typeof a.notice === 'string' ? a.notice : '');  // e.g. a learned reward that does not answer
  setText(r.safety, safetyText(a));
  r.safety.classList.toggle('stopped', a.mode === 'SAFETY');
  r.root.querySelector('button[data-command="acknowledge"]').disabled = a.mode !== 'SAFETY';
  setText(r.labels.intervention_toggle, a.mode === 'HUMAN' ? 'Hand back' : 'Intervene');
  setText(r.labels.pause, a.mode === 'PAUSED' ? 'Resume' : 'Pause');
  updateCameras(r, a);
}

// ---------------------------------------------------------------- cameras

function updateCameras(r, a) {
  const now = Date.now() / 1000, wanted = new Set();
  for (const [kind, cam] of [...arr(a.cameras).map((c) => ['camera', c]), ['view', a.view]]) {
    if (cam && typeof cam === 'object' && cam.name != null) wanted.add(updateTile(r, kind, cam, now));
  }
  for (const [key, tile] of r.tiles) if (!wanted.has(key)) { tile.fig.remove(); r.tiles.delete(key); }
}

// One camera tile: the image (src only replaced when the JPEG changed) and its caption.
function updateTile(r, kind, cam, now) {
  const name = String(cam.name), key = `${kind}:${name}`;
  let t = r.tiles.get(key);
  if (!t) {
    t = { b64: null };
    t.img = el('img', { class: kind, 'data-camera': name, alt: name });
    t.res = el('span', { class: 'cam-res' });
    t.age = el('span', { class: 'frame-age', 'data-camera': name });
    t.fig = el('figure', { class: 'cam-tile' }, t.img,
      el('figcaption', {}, el('span', { class: 'cam-name', text: name }), t.res, t.age));
    (kind === 'view' ? r.viewBox : r.camBox).append(t.fig);
    r.tiles.set(key, t);
  }
  if (typeof cam.jpeg === 'string' && cam.jpeg && cam.jpeg !== t.b64) t.img.src = 'data:image/jpeg;base64,' + (t.b64 = cam.jpeg);
  setText(t.res, isNum(cam.w) && isNum(cam.h) ? `${cam.w}×${cam.h}` : '');
  const age = isNum(cam.t) ? Math.round((now - cam.t) * 1000) : null;
  setText(t.age, age === null ? '—' : `${age} ms`);
  t.age.classList.toggle('stale', age !== null && age > 500);
  return key;
}

// ---------------------------------------------------------------- charts

function drawCharts(r, a) {
  const step = isNum(a.step) ? a.step : 0;
  const iv = arr(a.interventions).filter((e) => Array.isArray(e) && isNum(e[0]))
    .map((e) => [e[0], isNum(e[1]) ? e[1] : null, e[2] == null ? '' : String(e[2])]);
  const recent = arr(a.recent).filter((e) => e && typeof e === 'object')
    .map((e) => ({ s: e.success === true, len: isNum(e.length) ? e.length : 0,
      iv: isNum(e.intervention_steps) ? e.intervention_steps : 0 }));
  const rewards = arr(a.rewards).map((x) => (isNum(x) ? x : 0));
  redraw(r, 'reward', r.rewardCv, { rewards, step, iv }, drawRewards);
  redraw(r, 'timeline', r.timelineCv, { step, iv, recent }, drawTimeline);
  redraw(r, 'rates', r.ratesCv, { recent }, drawRates);
}

// Redraw a canvas only when its data or its size changed.
function redraw(r, name, cv, data, drawFn) {
  const dpr = window.devicePixelRatio || 1;
  const W = cv.clientWidth, H = cv.clientHeight;
  const sig = `${W}x${H}@${dpr}|${JSON.stringify(data)}`;
  if (r.sig[name] === sig || !W || !H) return;
  r.sig[name] = sig;
  if (cv.width !== Math.round(W * dpr)) cv.width = Math.round(W * dpr);
  if (cv.height !== Math.round(H * dpr)) cv.height = Math.round(H * dpr);
  const ctx = cv.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, W, H);
  ctx.font = '10px system-ui, sans-serif';
  ctx.textBaseline = 'top';
  drawFn(ctx, W, H, data);
}

function label(ctx, text, x, y, color = C.text) { ctx.fillStyle = color; ctx.fillText(text, x, y); }

function drawRewards(ctx, W, H, { rewards, step, iv }) {
  const n = rewards.length;
  if (!n) return label(ctx, 'rewards: none yet this episode', 4, H / 2 - 5);
  let lo = Math.min(0, ...rewards), hi = Math.max(0, ...rewards);
  if (hi - lo < 1e-9) hi = lo + 1;
  const top = 13, y = (v) => top + ((hi - v) / (hi - lo)) * (H - top - 2);
  const bw = W / Math.max(n, 50), offset = Math.max(0, step - n);
  ctx.fillStyle = 'rgba(232,135,30,0.2)';              // intervention spans behind the bars
  for (const [s, e] of iv) {
    const x0 = Math.max(0, (s - offset) * bw), x1 = Math.min(n * bw, ((e ?? step) - offset) * bw);
    if (x1 > x0) ctx.fillRect(x0, top, x1 - x0, H - top);
  }
  const y0 = y(0);
  for (let i = 0; i < n; i++) {
    const yv = y(rewards[i]);
    ctx.fillStyle = rewards[i] >= 0 ? C.reward : C.rewardNeg;
    ctx.fillRect(i * bw, Math.min(y0, yv), Math.max(1, bw > 3 ? bw - 1 : bw), Math.max(1, Math.abs(yv - y0)));
  }
  ctx.fillStyle = C.grid;
  ctx.fillRect(0, y0, W, 1);
  label(ctx, `reward/step · last ${rewards[n - 1].toFixed(3)} · range ${lo.toFixed(2)}…${hi.toFixed(2)}`, 4, 1);
}

function drawTimeline(ctx, W, H, { step, iv, recent }) {
  // Current episode: policy steps green, intervention spans orange, labelled by device.
  const top = 13, barH = 16;
  const total = Math.max(1, step, ...iv.map((e) => e[1] ?? step));
  label(ctx, `current episode · ${step} steps`, 4, 1);
  ctx.fillStyle = '#1c222c';
  ctx.fillRect(0, top, W, barH);
  ctx.fillStyle = C.policy;
  ctx.fillRect(0, top, (W * step) / total, barH);
  for (const [s, e, device] of iv) {
    const x0 = (W * s) / total, x1 = (W * (e ?? step)) / total, w = Math.max(2, x1 - x0);
    ctx.fillStyle = C.human;
    ctx.fillRect(x0, top, w, barH);
    if (device && ctx.measureText(device).width + 4 < w) label(ctx, device, x0 + 2, top + 3, '#111');
  }
  // Recent episodes, oldest left: green success / red failure, intervention fraction shaded orange on top.
  const y1 = top + barH + 14, h = H - y1 - 1;
  label(ctx, 'recent episodes (oldest → newest)', 4, top + barH + 2);
  if (!recent.length || h < 3) return;
  const slot = W / Math.max(RECENT_SLOTS, recent.length);
  recent.forEach((e, i) => {
    const x = i * slot, w = Math.max(1, slot - 1);
    ctx.fillStyle = e.s ? C.success : C.failure;
    ctx.fillRect(x, y1, w, h);
    const f = e.len > 0 ? Math.min(1, e.iv / e.len) : 0;
    ctx.fillStyle = C.human;
    if (f > 0) ctx.fillRect(x, y1, w, Math.max(1, f * h));
  });
}

function drawRates(ctx, W, H, { recent }) {
  const left = 24, top = 14, pw = W - left - 4, ph = H - top - 3, y = (v) => top + (1 - v) * ph;
  for (const v of [0, 0.5, 1]) {
    ctx.fillStyle = C.grid;
    ctx.fillRect(left, Math.round(y(v)), pw, 1);
    label(ctx, v.toFixed(1), 2, y(v) - 5);
  }
  let lx = left;                                       // legend, left to right
  const legend = (text, color) => {
    if (color) { ctx.fillStyle = color; ctx.fillRect(lx, 4, 10, 3); lx += 13; }
    label(ctx, text, lx, 1);
    lx += ctx.measureText(text).width + 10;
  };
  legend('success', C.success);
  legend('interventions', C.human);
  legend(`(running mean of ${RATE_WINDOW} episodes)`);
  if (!recent.length) return label(ctx, 'no finished episodes yet', left + 6, top + ph / 2 - 5);
  // Running means over a window of RATE_WINDOW episodes (interventions weighted by steps).
  const succ = [], intv = [];
  recent.forEach((_, i) => {
    const win = recent.slice(Math.max(0, i - RATE_WINDOW + 1), i + 1);
    succ.push(win.filter((e) => e.s).length / win.length);
    const steps = win.reduce((s, e) => s + e.len, 0);
    intv.push(steps > 0 ? Math.min(1, win.reduce((s, e) => s + e.iv, 0) / steps) : 0);
  });
  const x = (i) => left + (recent.length === 1 ? pw / 2 : (i / (recent.length - 1)) * pw);
  for (const [series, color] of [[succ, C.success], [intv, C.human]]) {
    ctx.strokeStyle = ctx.fillStyle = color;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    series.forEach((v, i) => (i ? ctx.lineTo(x(i), y(v)) : ctx.moveTo(x(i), y(v))));
    ctx.stroke();
    ctx.fillRect(x(series.length - 1) - 2, y(series[series.length - 1]) - 2, 4, 4);  // latest value
  }
}

// ---------------------------------------------------------------- keys

const typingIn = (t) => !!t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName));

document.addEventListener('keydown', (e) => {
  if (e.repeat) {                       // auto-repeat: not a new press, but keep the page from scrolling
    if (held.has(e.code || e.key) && PREVENT_KEYS.has(e.key)) e.preventDefault();
    return;
  }
  if (e.ctrlKey || e.metaKey || e.altKey || typingIn(e.target) || selectedId === null) return;
  if (!send({ type: 'key', actor: selectedId, key: e.key, down: true })) return;
  held.set(e.code || e.key, { key: e.key, actor: selectedId });
  if (PREVENT_KEYS.has(e.key)) e.preventDefault();
});

document.addEventListener('keyup', (e) => {
  // Release what went down (same key spelling, same actor), even if shift or the selection changed since.
  const down = held.get(e.code || e.key);
  held.delete(e.code || e.key);
  if (!down && (typingIn(e.target) || selectedId === null || e.ctrlKey || e.metaKey || e.altKey)) return;
  const sent = send({ type: 'key', actor: down ? down.actor : selectedId, key: down ? down.key : e.key, down: false });
  if (sent && PREVENT_KEYS.has(e.key)) e.preventDefault();
});

// Keys held while the page loses focus would never see their key-up: release them all.
function releaseAll() {
  for (const { key, actor } of held.values()) send({ type: 'key', actor, key, down: false });
  held.clear();
}
window.addEventListener('blur', releaseAll);
document.addEventListener('visibilitychange', () => { if (document.hidden) releaseAll(); });

connect();
