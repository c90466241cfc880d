'use strict';
// robo_rl GUI: the live checks (issue 52), beside app.js (it calls updateChecks and updateQueue on each snapshot;
// this file uses its send, el, setText, fmt, isNum, arr, rows, selectedId, select, redraw, label, addMessage).
// Per actor: its reset state, and with a learned reward its score trace against the threshold (runs of debounce_k
// steps at or above it shaded: where the wrapper declares a success), the threshold control and the mark keys.
// In the side bar: the queue of actors waiting for a person, longest first.

const MARK_KEYS = { f: 'false_success', m: 'missed_success' };   // one key marks the selected actor's last frames
const MARK_WORDS = { false_success: 'False success', missed_success: 'Missed success' };
const RESET_WORDS = { running: 'running', resetting: 'resetting the scene', checking: 'checking the reset',
  waiting: 'WAITING FOR A PERSON' };

function createChecks(r) {
  const c = { hasReward: false };
  c.reset = el('div', { class: 'reset-state' });
  c.model = el('div', { class: 'reward-model' });
  c.trace = el('canvas', { class: 'score-trace' });
  c.input = el('input', { class: 'threshold-input', type: 'number', min: '0', max: '1', step: '0.01' });
  c.set = el('button', { type: 'button', class: 'threshold-set', text: 'Set threshold' });
  const sendThreshold = () => {
    const value = c.input.value.trim() === '' ? NaN : Number(c.input.value);
    if (!send({ type: 'reward_threshold', actor: r.id, threshold: Number.isFinite(value) ? value : null })) {
      addMessage('error', 'not connected: threshold not sent');
    }
  };
  c.set.addEventListener('click', (e) => { e.stopPropagation(); sendThreshold(); });
  c.input.addEventListener('keydown', (e) => { if (e.key === 'Enter') sendThreshold(); });
  const marks = Object.entries(MARK_KEYS).map(([key, labelName]) => {
    const b = el('button', { type: 'button', class: 'mark', 'data-label': labelName },
      el('span', { class: 'label', text: MARK_WORDS[labelName] }), el('kbd', { class: 'shortcut', text: key.toUpperCase() }));
    b.addEventListener('mousedown', (e) => e.preventDefault());
    b.addEventListener('click', (e) => { e.stopPropagation(); select(r.id); sendMark(r.id, labelName); b.blur(); });
    return b;
  });
  c.reward = el('div', { class: 'reward-checks', hidden: true }, c.trace,
    el('div', { class: 'reward-controls' }, c.model, c.input, c.set, ...marks));
  c.root = el('div', { class: 'checks' }, c.reset, c.reward);
  r.root.append(c.root);
  return c;
}

function sendMark(actor, labelName) {
  if (!send({ type: 'reward_mark', actor, label: labelName })) addMessage('error', 'not connected: mark not sent');
  else addMessage('info', `${MARK_WORDS[labelName]} marked on ${actor}`);
}

function resetText(a) {
  if (typeof a.reset_state !== 'string') return '';
  const n = a.reset_counts && typeof a.reset_counts === 'object' ? a.reset_counts : {};
  const counts = isNum(n.resets) ? ` · resets ${n.resets} (check passed ${fmt(n.resets_ok)}, failed ` +
    `${fmt(n.resets_failed)}) · person called ${fmt(n.reset_calls)}×` : '';
  const why = a.reset_state === 'waiting' && a.reset_why ? `: ${a.reset_why}` : '';
  return `reset: ${RESET_WORDS[a.reset_state] || a.reset_state}${why}${counts}`;
}

function updateChecks(r, a) {
  const c = r.checks || (r.checks = createChecks(r));
  setText(c.reset, resetText(a));
  c.reset.classList.toggle('waiting', a.reset_state === 'waiting');
  c.hasReward = isNum(a.reward_threshold);
  c.reward.hidden = !c.hasReward;
  if (!c.hasReward) return;
  setText(c.model, `reward model v${fmt(a.reward_model_version)} · threshold ${a.reward_threshold.toFixed(2)} · ` +
    `debounce ${fmt(a.reward_debounce_k)} · marks ${fmt(a.reward_marks)}`);
  c.input.placeholder = a.reward_threshold.toFixed(2);
  const scores = arr(a.scores).map((x) => (isNum(x) ? x : null));
  redraw(r, 'scores', c.trace, { scores, t: a.reward_threshold, k: a.reward_debounce_k || 1 }, drawScores);
}

function drawScores(ctx, W, H, { scores, t, k }) {
  const top = 13, y = (v) => top + (1 - v) * (H - top - 2), n = scores.length, bw = W / Math.max(n, 50);
  let run = 0;                                     // shade where k steps in a row reach the threshold
  ctx.fillStyle = 'rgba(60,207,102,0.25)';
  scores.forEach((s, i) => {
    run = s !== null && s >= t ? run + 1 : 0;
    if (run >= k) ctx.fillRect((i - k + 1) * bw, top, k * bw, H - top);
  });
  ctx.strokeStyle = C.reward;
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  let pen = false;
  scores.forEach((s, i) => {
    if (s === null) { pen = false; return; }
    if (pen) ctx.lineTo((i + 0.5) * bw, y(s)); else ctx.moveTo((i + 0.5) * bw, y(s));
    pen = true;
  });
  ctx.stroke();
  ctx.fillStyle = C.failure;                       // the threshold line
  ctx.fillRect(0, Math.round(y(t)), W, 1);
  const last = n && scores[n - 1] !== null ? scores[n - 1].toFixed(2) : '—';
  label(ctx, `P(success)/step · last ${last} · threshold ${t.toFixed(2)} · success after ${k} in a row`, 4, 1);
}

function updateQueue(queue) {
  let box = document.getElementById('queue');
  if (!box) {
    box = el('section', { id: 'queue', class: 'panel' },
      el('h2', { text: 'Waiting for a person' }), el('ol', { class: 'queue-list' }));
    document.getElementById('side').prepend(box);
  }
  const items = arr(queue).filter((q) => q && typeof q === 'object' && q.actor != null);
  const now = Date.now() / 1000;
  const list = box.querySelector('.queue-list');
  const text = items.map((q) => `${q.actor}|${q.why}`).join('\n');
  if (list.dataset.sig !== text) {
    list.dataset.sig = text;
    list.replaceChildren(...(items.length ? items.map((q) => el('li', { class: 'queue-item', 'data-actor': String(q.actor) },
      el('b', { text: String(q.actor) }), el('span', { class: 'queue-age' }), el('span', { text: ` ${q.why}` })))
      : [el('li', { class: 'queue-empty', text: 'nobody waits' })]));
  }
  items.forEach((q, i) => {
    const age = list.children[i]?.querySelector('.queue-age');
    if (age) setText(age, isNum(q.since) ? ` · ${Math.max(0, now - q.since).toFixed(0)} s · ` : ' · ');
  });
  box.classList.toggle('calling', items.length > 0);
}

// A mark key goes to the selected actor's learned reward (it never reaches the key table while that actor has one).
for (const type of ['keydown', 'keyup']) {
  window.addEventListener(type, (e) => {
    const labelName = MARK_KEYS[e.key];
    const r = rows.get(selectedId);
    if (!labelName || !r || !r.checks?.hasReward || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.target && (e.target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(e.target.tagName))) return;
    e.stopImmediatePropagation();
    e.preventDefault();
    if (type === 'keydown' && !e.repeat) sendMark(selectedId, labelName);
  }, true);
}
