// The fencelock dashboard. Plain JavaScript, no framework and no build:
// it polls the server's own API (GET /v1/overview, /v1/cluster/members)
// every second, counts leases down between polls on the browser's clock,
// follows GET /v1/watch for the recent events (or, without it, derives
// them from what changed between two answers), and draws its charts as
// SVG.
'use strict';

(function () {
  const params = new URLSearchParams(location.search);
  const POLL_MS = Math.min(10000, Math.max(100, Number(params.get('poll')) || 1000));
  const TOKEN_KEY = 'fencelock.token';
  const MAX_EVENTS = 80;
  const RATE_SAMPLES = 120;
  const RATE_SPAN_MS = 2000;
  const LIST_LIMIT = 500;
  const SVG = 'http://www.w3.org/2000/svg';

  const $ = (id) => document.getElementById(id);

  const state = {
    prefix: params.get('prefix') || '',
    prev: null,        // the last overview answered: {nowMs, lastToken, locks: Map}
    rows: [],          // countdowns: {text, fill, box, r0, ttl, t0}
    samples: [],       // counters at each answer: {nowMs, grants, handoffs, releases, expiries}
    events: [],        // newest first
    lastOk: 0,         // performance.now() of the last answer
    paused: false,     // waiting for a token
    timer: 0,
    inflight: false,
  };

  // --- token (sessionStorage: this tab only) ---

  function token() {
    try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch (_) { return ''; }
  }
  function setToken(t) {
    try {
      if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
    } catch (_) { /* storage off: the token lives until reload */ }
    $('signout').hidden = !t;
  }

  // --- calls ---

  async function call(path, timeoutMs, cancel) {
    const headers = { Accept: 'application/json' };
    const t = token();
    if (t) headers.Authorization = 'Bearer ' + t;
    const ctl = new AbortController();
    const timeout = setTimeout(() => ctl.abort(), timeoutMs || 5000);
    if (cancel) cancel.addEventListener('abort', () => ctl.abort());
    try {
      // Relative to /ui/, so a proxy that serves the server under a path still works.
      const resp = await fetch('../' + path.replace(/^\//, ''), { headers, cache: 'no-store', credentials: 'same-origin', signal: ctl.signal });
      let body = null;
      try { body = await resp.json(); } catch (_) { body = null; }
      return { status: resp.status, body: body || {} };
    } finally {
      clearTimeout(timeout);
    }
  }

  function schedule(ms) {
    clearTimeout(state.timer);
    state.timer = setTimeout(poll, ms);
  }

  async function poll() {
    if (state.inflight || state.paused) return;
    state.inflight = true;
    const started = performance.now();
    try {
      let q = '?limit=' + LIST_LIMIT;
      if (state.prefix) q += '&prefix=' + encodeURIComponent(state.prefix);
      let answers;
      try {
        answers = await Promise.all([call('/v1/overview' + q), call('/v1/cluster/members')]);
      } catch (e) {
        setLive('error', 'no answer');
        banner('error', 'The server does not answer (' + (e && e.name === 'AbortError' ? 'timed out' : (e && e.message) || e) + '). Retrying.');
        return;
      }
      try {
        state.askedAt = started;
        handle(answers[0], answers[1]);
      } catch (e) {
        banner('error', 'The page could not show the answer: ' + ((e && e.message) || e) + '.');
        throw e; // for the console
      }
    } finally {
      state.inflight = false;
      if (!state.paused) schedule(Math.max(0, POLL_MS - (performance.now() - started)));
    }
  }

  function handle(ov, mem) {
    if (ov.status === 401 || mem.status === 401) {
      const b = ov.status === 401 ? ov.body : mem.body;
      askToken(token() ? '401 — the server did not accept this token: ' + (b.error || 'unauthenticated') : '');
      return;
    }
    $('auth').hidden = true;
    $('main').hidden = false;
    if (mem.status === 200) renderMembers(mem.body);
    const noLeader = leaderless(ov, mem);
    if (ov.status === 200 && !noLeader) {
      banner(null);
      state.lastOk = performance.now();
      setLive('live', 'live');
      renderOverview(ov.body);
      return;
    }
    const b = ov.body;
    if (b.code === 'removed' || (mem.status === 200 && mem.body.removed)) {
      setLive('error', 'removed');
      const other = ((mem.status === 200 && mem.body.members) || []).find((m) => m.client_addr && m.id !== mem.body.node);
      const href = other ? location.protocol + '//' + other.client_addr + '/ui/' : '';
      banner('error', 'This node has been removed from the cluster and serves nothing' + (other ? '; open another member’s dashboard, at ' : '.'), null, href, other && other.client_addr);
      showNothing('A removed node holds no locks for anyone.');
    } else if (ov.status === 403) {
      setLive('auth', 'permission denied');
      banner('error', '403 — ' + (b.error || 'permission denied') + '. ', 'Use another token');
      showNothing('The token does not allow reading these locks.');
    } else if (noLeader) {
      // Never green without a leader: nothing can be granted, extended or
      // released, whatever this node answers.
      setLive('error', 'no leader');
      banner('error', quorumText(mem.status === 200 ? mem.body : null), null, null, null, 'no-leader');
      showNothing('No leader: the locks are read on the leader, and there is none. The cluster table shows this node’s own view.');
    } else if (b.code === 'not_leader') {
      setLive('live', 'follower');
      const href = b.leader ? location.protocol + '//' + b.leader + '/ui/' : '';
      banner('warn', 'This node is a follower: locks are read on the leader' + (b.leader ? ', at ' : ' (none is known yet).'), null, href, b.leader);
      showNothing('Open the leader’s dashboard to see its locks.');
    } else {
      setLive('error', 'HTTP ' + ov.status);
      banner('error', (b.error || 'HTTP ' + ov.status) + (b.code ? ' (' + b.code + ')' : '') + '. Retrying.');
    }
  }

  // leaderless says whether the answering node knows no leader: its
  // members answer says so (no_leader), or names none (a server that
  // does not say); without a members answer, a not_leader that names
  // no leader.
  function leaderless(ov, mem) {
    if (mem.status === 200) return !mem.body.removed && (!!mem.body.no_leader || !mem.body.leader);
    return ov.status !== 200 && ov.body.code === 'not_leader' && !ov.body.leader;
  }

  // quorumText is the banner of a node without a leader: how many voters
  // it has heard from against the quorum, as its members answer says.
  function quorumText(m) {
    if (!m || !Array.isArray(m.members) || !m.unreachable_after_ms) {
      return 'No leader is known: nothing can be granted, extended or released until one is elected. Retrying.';
    }
    const voters = m.members.filter((x) => String(x.suffrage).toLowerCase() === 'voter');
    const heard = voters.filter((x) => x.state === 'healthy' || x.state === 'leader').length;
    const quorum = Math.floor(voters.length / 2) + 1;
    const seen = m.node + ' has heard from ' + heard + ' of ' + voters.length + (voters.length === 1 ? ' voter' : ' voters') +
      ' in the last ' + fmtDuration(m.unreachable_after_ms) + ' (itself included); a quorum is ' + quorum + '. ';
    if (heard < quorum) {
      return 'No quorum, no leader: ' + seen + 'Nothing can be granted, extended or released until a majority of the voters is back. The cluster table shows ' + m.node + '’s own view.';
    }
    return 'No leader: ' + seen + 'An election may be under way; nothing can be granted, extended or released until it ends.';
  }

  function askToken(msg) {
    state.paused = true;
    clearTimeout(state.timer);
    setToken('');
    setLive('auth', 'token needed');
    banner(null);
    $('main').hidden = true;
    $('auth').hidden = false;
    $('auth-msg').textContent = msg || 'The server answered 401 unauthenticated: with ACLs on, every call needs a token. The page itself holds no data.';
    $('auth-msg').dataset.kind = msg ? 'error' : '';
    $('auth-token').value = '';
    $('auth-token').focus();
  }

  // --- the overview ---

  function topPrefix(key) {
    const i = key.indexOf('/');
    return i < 0 ? '' : key.slice(0, i + 1);
  }

  function renderOverview(o) {
    // Counted down from when the poll was sent, which the server's answer
    // follows: the page never shows more time left than there is.
    const t0 = state.askedAt || performance.now();
    const locks = o.locks || [];
    const delayed = o.delayed || []; // keys in their lock-delay: no lease, a queue held back
    // A key has one lease, or several: the holders of a semaphore's
    // permits, the readers of a read/write lock.
    const byKey = new Map();
    for (const l of locks) {
      if (!byKey.has(l.key)) byKey.set(l.key, []);
      byKey.get(l.key).push(l);
    }
    $('stat-locks').textContent = locks.length + (o.more ? '+' : '');
    $('stat-locks-sub').textContent = (state.prefix ? 'under ' + state.prefix : 'live leases') +
      (delayed.length ? ' · ' + delayed.length + (o.delayed_more ? '+' : '') + (delayed.length === 1 ? ' key' : ' keys') + ' in lock-delay' : '');
    // Waiting counts the waiters the page lists, so the tile and the
    // chips agree; the server's count of all queues (other prefixes, keys
    // a token may not read, keys past the page) is said beside it.
    const waits = queuedWaits(locks.concat(delayed));
    $('stat-queued').textContent = String(waits.total);
    $('stat-queued-sub').textContent = o.queued === waits.total ? (waits.total ? 'queued on the keys below' : 'acquires queued, all keys')
      : o.queued + ' queued in all, ' + waits.total + ' listed below';
    $('stat-last-token').textContent = o.last_token ? String(o.last_token) : 'none yet';
    $('node').textContent = o.node ? 'node ' + o.node : '';

    diffEvents(o, byKey);
    sample(o);

    const prevKeys = state.prev ? state.prev.locks : null;
    const body = $('locks-body');
    const frag = document.createDocumentFragment();
    state.rows = [];
    // The keys in their lock-delay (no lease, their queues held back)
    // go in among the leases, in key order.
    const items = locks.map((l) => ({ key: l.key, l })).concat(delayed.map((d) => ({ key: d.key, d })));
    items.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    let group = null;
    let lastKey = null;
    for (const it of items) {
      const g = topPrefix(it.key);
      if (g !== group) {
        group = g;
        const n = locks.filter((x) => topPrefix(x.key) === g).length;
        const nd = delayed.filter((x) => topPrefix(x.key) === g).length;
        const label = (g || 'keys without a prefix') + ' · ' + n + (n === 1 ? ' lock' : ' locks') + (nd ? ' · ' + nd + ' in lock-delay' : '');
        frag.appendChild(el('tr', { class: 'group' }, [el('td', { colspan: '5' }, [label])]));
      }
      if (it.d) {
        frag.appendChild(delayedRow(it.d, t0));
        lastKey = it.key;
        continue;
      }
      const l = it.l;
      const p = prevKeys && prevKeys.get(l.key);
      const fresh = prevKeys && (!p || !p.some((x) => x.token === l.token));
      // A key's queue is one, whatever its holders: it is drawn on the
      // key's first row.
      frag.appendChild(lockRow(l, o, t0, fresh, l.key === lastKey));
      lastKey = l.key;
    }
    body.replaceChildren(frag);
    $('locks').hidden = items.length === 0;
    $('empty').hidden = items.length !== 0;
    $('empty-prefix').textContent = state.prefix ? ' under ' + state.prefix : '';
    $('more').hidden = !o.more;
    $('more').textContent = 'Showing the first ' + locks.length + ' locks' + (state.prefix ? ' under ' + state.prefix : '') + '; narrow the prefix to see the others.';
    tick();

    renderSessions(o, t0);
    renderRates();
    renderHistogram($('chart-hold'), o.stats.hold, 'hold', $('hold-sum'));
    renderHistogram($('chart-wait'), o.stats.wait, 'wait', $('wait-sum'), waits);

    state.prev = { nowMs: o.now_ms, lastToken: o.last_token, locks: byKey };
    // Cluster time to the browser's, for the events' times.
    const known = state.skewFromLeader;
    state.clockSkew = Date.now() - o.now_ms;
    state.skewFromLeader = true;
    if (!known) renderEvents();
  }

  function lockRow(l, o, t0, fresh, sameKey) {
    const text = el('span', { class: 'ttl-text' });
    const fill = el('div', { class: 'ttl-fill' });
    const box = el('div', { class: 'ttl', title: 'TTL ' + fmtDuration(l.ttl_ms) + '; held ' + fmtDuration(l.held_ms) + ' under this token' }, [el('div', { class: 'ttl-bar' }, [fill]), text]);
    state.rows.push({ text, fill, box, r0: l.remaining_ms, ttl: l.ttl_ms, t0 });
    const tokenCell = [String(l.token)];
    if (l.token === o.last_token) tokenCell.push(el('span', { class: 'newest', title: 'the last token issued' }, ['newest']));
    let queue;
    if (sameKey && waitersOn(l) > 0) {
      queue = el('span', { class: 'nowait', title: 'the key’s one queue is on its first row' }, ['″']);
    } else if (sameKey) {
      queue = el('span', { class: 'nowait' }, ['—']);
    } else {
      queue = queueOf(l);
    }
    return el('tr', { class: 'lock' + (fresh ? ' fresh' : ''), 'data-key': l.key, 'data-token': String(l.token) }, [
      el('td', { class: 'key' }, [l.key, ...leaseKind(l)]),
      el('td', { class: 'holder' }, [l.holder]),
      el('td', { class: 'token' }, tokenCell),
      el('td', {}, [box]),
      el('td', { class: 'waiters-cell' }, [queue]),
    ]);
  }

  // queueOf is the chips of a key's queue, head first.
  function queueOf(l) {
    const ws = (l.waiters || []).map((w, i) => el('span', { class: 'waiter', 'data-holder': w.holder, title: waiterTitle(w) }, [
      el('span', { class: 'pos' }, [String(i + 1)]), w.holder, ...waiterKind(w), el('span', { class: 'age' }, [fmtDuration(w.waited_ms)]),
    ]));
    const total = waitersOn(l);
    if (total > ws.length) ws.push(el('span', { class: 'waiter more' }, ['+' + (total - ws.length) + ' more']));
    return ws.length ? el('div', { class: 'waiters' }, ws) : el('span', { class: 'nowait' }, ['—']);
  }

  // delayedRow is a key in its lock-delay: no holder, no token, the
  // delay counting down, and the waiters it holds back.
  function delayedRow(d, t0) {
    const text = el('span', { class: 'ttl-text' });
    const fill = el('div', { class: 'ttl-fill' });
    const box = el('div', { class: 'ttl', title: 'lock-delay: its lease expired, and nobody, its waiters included, is granted the key before the delay ends' }, [el('div', { class: 'ttl-bar' }, [fill]), text]);
    state.rows.push({ text, fill, box, r0: d.remaining_ms, ttl: 60000, t0, ended: 'ending' });
    return el('tr', { class: 'lock delayed', 'data-key': d.key, 'data-delayed': 'true' }, [
      el('td', { class: 'key' }, [d.key, el('span', { class: 'kind-tag delay-tag', title: 'granted to nobody until its lock-delay ends; then its first waiter is' }, ['lock-delay'])]),
      el('td', { class: 'holder nobody' }, ['nobody']),
      el('td', { class: 'token' }, ['–']),
      el('td', {}, [box]),
      el('td', { class: 'waiters-cell' }, [queueOf(d)]),
    ]);
  }

  // waitersOn is how many wait on l's key: the server's count, or those
  // listed when it gives none.
  function waitersOn(l) {
    return Math.max(l.waiters_total || 0, (l.waiters || []).length);
  }

  // queuedWaits counts the waiters queued on the keys of locks, each
  // key's queue once, and collects how long each listed one has waited.
  function queuedWaits(locks) {
    const seen = new Set();
    const out = { total: 0, waitedMs: [] };
    for (const l of locks) {
      if (seen.has(l.key)) continue;
      seen.add(l.key);
      out.total += waitersOn(l);
      for (const w of l.waiters || []) out.waitedMs.push(w.waited_ms);
    }
    return out;
  }

  // waiterKind marks what a read/write lock's waiter asks for, when the
  // server says (a semaphore's waiter asks for one permit, as its holders
  // hold).
  function waiterKind(w) {
    return w.mode ? [el('span', { class: 'wkind' }, [w.mode])] : [];
  }

  function waiterTitle(w) {
    let t = 'waiting ' + fmtDuration(w.waited_ms) + ', gives up in ' + fmtDuration(w.left_ms);
    if (w.mode) t += '; wants to ' + (w.mode === 'write' ? 'write' : 'read');
    if (w.session) t += '; under session ' + w.session;
    return t;
  }

  // --- sessions: one lease for many locks ---

  function renderSessions(o, t0) {
    if (!Array.isArray(o.sessions)) { // a server that does not answer them
      $('sessions').hidden = true;
      $('sessions-empty').hidden = false;
      $('sessions-empty').textContent = 'This server does not report sessions.';
      $('sessions-sum').textContent = '';
      return;
    }
    const open = o.sessions_open || 0;
    $('sessions-sum').textContent = o.stats_hidden
      ? o.sessions.length + ' with listed locks (the count of all open sessions needs read on every key)'
      : open + ' open' + (o.sessions.length < open ? ' · ' + o.sessions.length + ' with listed locks' : '');
    const rows = o.sessions.map((ss) => {
      const text = el('span', { class: 'ttl-text' });
      const fill = el('div', { class: 'ttl-fill' });
      const box = el('div', { class: 'ttl', title: 'session TTL ' + fmtDuration(ss.ttl_ms) + '; its locks end with it' }, [el('div', { class: 'ttl-bar' }, [fill]), text]);
      state.rows.push({ text, fill, box, r0: ss.remaining_ms, ttl: ss.ttl_ms, t0 });
      const keys = [];
      for (const k of ss.keys || []) keys.push(el('code', {}, [k]), ' ');
      keys.pop();
      const more = (ss.locks || 0) - (ss.keys || []).length;
      if (more > 0) keys.push(el('span', { class: 'more' }, [' +' + more + ' more']));
      const notes = [];
      if (ss.waiting) notes.push(el('div', { class: 'hint' }, ['and waiting on ' + ss.waiting + (ss.waiting === 1 ? ' key' : ' keys')]));
      return el('tr', { 'data-session': String(ss.id) }, [
        el('td', {}, [el('div', { class: 'holder' }, [ss.holder]), el('div', { class: 'sid hint' }, ['session ' + ss.id])]),
        el('td', {}, [el('div', { class: 'keys' }, keys.length ? keys : ['no lock you may read']), ...notes]),
        el('td', {}, [box]),
      ]);
    });
    $('sessions-body').replaceChildren(...rows);
    $('sessions').hidden = rows.length === 0;
    $('sessions-empty').hidden = rows.length !== 0;
    $('sessions-empty').textContent = open ? 'No session holds a listed lock.' : 'No session is open. A session is one lease for many locks: they are kept together by one keep-alive and lost together.';
  }

  // leaseKind marks a semaphore's permit or a read/write lock's hold.
  function leaseKind(l) {
    if (l.session) return [el('span', { class: 'kind-tag session-tag', title: 'held under session ' + l.session + ': it ends with the session' }, ['session ' + l.session])];
    if (l.kind === 'semaphore') return [el('span', { class: 'kind-tag', title: 'a permit of a semaphore of ' + l.permits }, ['permit ' + l.slot + '/' + l.permits])];
    if (l.kind === 'rwlock') return [el('span', { class: 'kind-tag', title: 'a hold of a read/write lock' }, [l.mode || 'rw'])];
    return [];
  }

  // tick counts every lease down on the browser's clock between polls.
  function tick() {
    const now = performance.now();
    for (const r of state.rows) {
      const left = Math.max(0, r.r0 - (now - r.t0));
      r.text.textContent = left > 0 ? fmtRemaining(left) : r.ended || 'expiring';
      r.text.dataset.ms = String(Math.round(left));
      r.fill.style.width = (r.ttl > 0 ? Math.min(100, (100 * left) / r.ttl) : 0).toFixed(1) + '%';
      r.box.dataset.level = left <= 0 ? 'out' : left < r.ttl / 4 ? 'low' : 'ok';
    }
    if (state.lastOk && !state.paused) {
      const age = (now - state.lastOk) / 1000;
      if (age > 3 && $('live').dataset.state === 'live') setLive('error', 'no answer for ' + Math.round(age) + 's');
    }
  }

  function showNothing(msg) {
    state.rows = [];
    state.prev = null;
    $('locks-body').replaceChildren(el('tr', {}, [el('td', { colspan: '5', class: 'hint' }, [msg])]));
    $('sessions-body').replaceChildren();
    $('sessions').hidden = true;
    $('sessions-empty').hidden = false;
    $('sessions-empty').textContent = msg;
    $('sessions-sum').textContent = '';
    $('locks').hidden = false;
    $('empty').hidden = true;
    $('more').hidden = true;
    for (const id of ['stat-locks', 'stat-queued', 'stat-last-token']) $(id).textContent = '–';
  }

  // --- recent events, from what changed between two answers ---

  function diffEvents(o, byKey) {
    const prev = state.prev;
    if (!prev || watch.on) return; // the watch tells them better
    const at = new Date();
    const found = [];
    const ended = (p) => (o.now_ms >= prev.nowMs + p.remaining_ms ? 'expired' : 'released');
    // Per key, by token: a token gone is a lease that ended, a new token a
    // grant (a hand-off when its holder was queued on the key; a renewal
    // when the same holder's older token went in the same step).
    for (const key of new Set([...prev.locks.keys(), ...byKey.keys()])) {
      const before = prev.locks.get(key) || [];
      const now = byKey.get(key) || [];
      const gone = before.filter((p) => !now.some((l) => l.token === p.token));
      const added = now.filter((l) => !before.some((p) => p.token === l.token));
      const queued = before.length ? before[0].waiters || [] : [];
      for (const p of gone) {
        if (!added.some((l) => l.holder === p.holder)) found.push({ kind: ended(p), key, holder: p.holder, token: p.token });
      }
      for (const l of added) {
        const old = gone.find((p) => p.holder === l.holder);
        if (old) {
          // A renewal, or a release and a new acquire: either way a new grant.
          found.push({ kind: 'granted', key, holder: l.holder, token: l.token, old: old.token });
        } else if (queued.some((w) => w.holder === l.holder)) {
          const from = gone.find((p) => p.holder !== l.holder);
          found.push({ kind: 'handoff', key, holder: l.holder, token: l.token, from: from && from.holder });
        } else {
          found.push({ kind: 'granted', key, holder: l.holder, token: l.token });
        }
      }
    }
    found.sort((a, b) => (a.token || 0) - (b.token || 0));
    const seen = found.filter((e) => e.kind === 'granted' || e.kind === 'handoff').length;
    const unseen = o.last_token - prev.lastToken - seen;
    if (!state.prefix && unseen > 0) found.push({ kind: 'granted', note: '+' + unseen + (unseen === 1 ? ' grant' : ' grants') + ' that came and went between polls' });
    for (const e of found) {
      e.at = at;
      state.events.unshift(e);
    }
    if (state.events.length > MAX_EVENTS) state.events.length = MAX_EVENTS;
    if (found.length) renderEvents();
  }

  // --- recent events, from the watch (GET /v1/watch, a long-poll) ---
  //
  // While the server answers watches the pane shows every change as the
  // server made it, and the polls only keep the table; without them (an
  // older server, an error) it falls back to what the polls see.

  const WATCH_WAIT_MS = 20000;
  const WATCH_OFF = params.get('watch') === 'off'; // events from the polls only
  const watch = { on: false, gen: 0, rev: '', cancel: null, ended: new Map(), filled: undefined, wait: 1000, polling: 0 };

  // How long the next long-poll waits on the server. A long-poll keeps a
  // request out all the time, and a browser that runs the page on virtual
  // time (headless Chromium's --virtual-time-budget, for a screenshot or
  // a dump) pauses that time while a request is out: the budget would
  // never run out. So the wait starts at a second and doubles, up to
  // WATCH_WAIT_MS, only while the page's own clock sees the server's empty
  // answers take about as long as they waited. One that comes back at
  // once on that clock means the page does not run in real time: the
  // watch then asks without waiting, once a poll period, and tries a wait
  // again a minute (of the page's time) later.
  function watchWait() {
    if (!watch.rev) return 0;
    if (watch.polling > 0) { watch.polling--; return 0; }
    return watch.wait;
  }
  function judgeWait(waited, took, empty) {
    if (!(waited > 0) || !empty) return;
    if (took < waited / 2) {
      watch.wait = 1000;
      watch.polling = Math.ceil(60000 / POLL_MS);
    } else {
      watch.wait = Math.min(WATCH_WAIT_MS, watch.wait * 2);
    }
  }

  function delay(ms) { return new Promise((r) => setTimeout(r, ms)); }

  function restartWatch() {
    if (WATCH_OFF) return;
    if (watch.filled !== undefined && watch.filled !== state.prefix) {
      // Another prefix: its own history replaces the pane.
      state.events = [];
      watch.ended.clear();
      watch.filled = undefined;
      renderEvents();
    }
    watch.gen++;
    if (watch.cancel) watch.cancel.abort();
    watchLoop(watch.gen);
  }

  async function watchLoop(gen) {
    let backoff = 1000;
    watch.rev = '';
    while (gen === watch.gen) {
      if (state.paused) { await delay(250); continue; }
      const waitMs = watchWait();
      if (watch.rev && waitMs === 0) {
        await delay(POLL_MS); // polling: once a period
        if (gen !== watch.gen) return;
      }
      let q = '?limit=500&wait_ms=' + waitMs;
      if (state.prefix) q += '&prefix=' + encodeURIComponent(state.prefix);
      if (watch.rev) q += '&after=' + encodeURIComponent(watch.rev);
      watch.cancel = new AbortController();
      let r = null;
      const sent = performance.now();
      try { r = await call('/v1/watch' + q, waitMs + 10000, watch.cancel.signal); } catch (_) { r = null; }
      if (gen !== watch.gen) return;
      if (r && r.status === 200 && r.body.revision) {
        judgeWait(waitMs, performance.now() - sent, !(r.body.events || []).length);
        if (watch.rev) {
          for (const ev of r.body.events || []) watchEvent(ev, true);
        } else if (watch.filled !== state.prefix) {
          // The first answer is the present: what the server still keeps
          // before it fills the pane, and the live events follow on.
          const past = await pastEvents(r.body.revision, gen);
          if (gen !== watch.gen) return;
          if (past) {
            watch.filled = state.prefix;
            for (const ev of past) watchEvent(ev, false);
            renderEvents();
          }
        }
        watch.rev = r.body.revision;
        setWatching(true);
        backoff = 1000;
        continue;
      }
      if (r && r.status === 410) {
        // Fell behind the history: go on from where it now starts, and say
        // that some events in between are not shown.
        const from = watch.rev && r.body.compact_revision;
        if (from) {
          state.events.unshift({ kind: 'gap', at: new Date(), note: 'some events are not shown: the server’s history moved on past them' });
          renderEvents();
        }
        watch.rev = from || '';
        continue;
      }
      setWatching(false);
      watch.rev = '';
      // 404: this server has no watches; try again now and then.
      await delay(r && r.status === 404 ? 30000 : backoff);
      backoff = Math.min(10000, backoff * 2);
    }
  }

  // --- the history: the latest events up to a revision ---
  //
  // The server keeps its recent events (--watch-history) and answers them
  // oldest first after a revision. Revisions are raft log indexes, so the
  // page asks for the entries just before the present, and further back
  // (eight times as far each time) until it has a pane full or reaches
  // the start of the history, which a 410 names.

  const HISTORY_PAGE = 1000;
  const HISTORY_PAGES = 20; // per look back: 20,000 events at most

  function parseRev(s) {
    const [i, q] = String(s).split('.');
    return { i: Number(i), q: q === undefined ? Infinity : Number(q) };
  }

  function revAfter(a, b) {
    return a.i > b.i || (a.i === b.i && a.q > b.q);
  }

  async function pastEvents(present, gen) {
    const end = parseRev(present);
    let best = [];
    for (let span = 64; ; span *= 8) {
      const from = Math.max(0, end.i - span);
      const got = await historyAfter(String(from), end, gen);
      if (!got || gen !== watch.gen) return null;
      if (got.cut) return best; // too many to read: the shorter look back has the latest
      best = got.events;
      if (best.length >= MAX_EVENTS || from === 0 || got.start) return best.slice(-MAX_EVENTS);
    }
  }

  // historyAfter reads the events after after up to end: {events, start}
  // (start: it began where the history does), {cut} when they are more
  // than it reads, null on an error.
  async function historyAfter(after, end, gen) {
    let events = [];
    let start = false;
    for (let page = 0; page < HISTORY_PAGES; page++) {
      let q = '?wait_ms=0&limit=' + HISTORY_PAGE + '&after=' + encodeURIComponent(after);
      if (state.prefix) q += '&prefix=' + encodeURIComponent(state.prefix);
      let r;
      try { r = await call('/v1/watch' + q, 10000); } catch (_) { return null; }
      if (gen !== watch.gen) return null;
      if (r.status === 410 && r.body.compact_revision) {
        // Older than the history: start where it does (again, if it moved
        // on while this read, since what was read is then before it).
        after = r.body.compact_revision;
        events = [];
        start = true;
        continue;
      }
      if (r.status !== 200) return null;
      const evs = r.body.events || [];
      for (const ev of evs) {
        if (revAfter(parseRev(ev.revision), end)) return { events, start };
        events.push(ev);
      }
      if (events.length > 2 * MAX_EVENTS) events = events.slice(-MAX_EVENTS);
      if (evs.length < HISTORY_PAGE || !revAfter(end, parseRev(r.body.revision))) return { events, start };
      after = r.body.revision;
    }
    return { cut: true };
  }

  function setWatching(on) {
    if (watch.on !== on) {
      watch.on = on;
      state.prev = null; // a new baseline for the polls' events
    }
    $('events-source').textContent = on ? 'live, from the watch' : 'seen between polls';
    $('events-source').title = on ? 'Every change, from GET /v1/watch' : 'Derived from what changed between two answers of /v1/overview';
  }

  // watchEvent adds ev to the pane; live, it is drawn at once and its
  // arrival bounds the browser's clock against the cluster's.
  function watchEvent(ev, live) {
    if (live) clusterTimeSeen(ev.at_ms);
    const base = { atMs: ev.at_ms, key: ev.key, holder: ev.holder, token: ev.token };
    switch (ev.type) {
      case 'granted': {
        const waited = ev.since_ms < ev.at_ms;
        const from = watch.ended.get(ev.key);
        const e = Object.assign(base, { kind: waited ? 'handoff' : 'granted' });
        if (waited && from && from.at_ms === ev.at_ms) e.from = from.holder;
        else if (waited) e.kind = 'granted', e.waited = ev.at_ms - ev.since_ms;
        state.events.unshift(e);
        break;
      }
      case 'released':
      case 'expired':
        watch.ended.set(ev.key, { holder: ev.holder, at_ms: ev.at_ms });
        if (watch.ended.size > 1000) watch.ended.clear();
        state.events.unshift(Object.assign(base, { kind: ev.type }));
        break;
      case 'wait-joined':
        state.events.unshift(Object.assign(base, { kind: 'queued', token: 0 }));
        break;
      case 'wait-left':
        state.events.unshift(Object.assign(base, { kind: 'left', token: 0, reason: ev.reason }));
        break;
      default:
        return;
    }
    if (state.events.length > MAX_EVENTS) state.events.length = MAX_EVENTS;
    if (live) renderEvents();
  }

  // clusterTimeSeen notes that the cluster's clock had reached ms by now.
  // Without the leader's overview (a follower) the least difference seen
  // is the best guess of the offset: each is late by at most the delay.
  function clusterTimeSeen(ms) {
    if (!(ms > 0) || state.skewFromLeader) return;
    const d = Date.now() - ms;
    if (state.clockSkew === undefined || d < state.clockSkew) {
      const first = state.clockSkew === undefined;
      state.clockSkew = d;
      if (first) renderEvents();
    }
  }

  const KIND_LABEL = { granted: 'granted', handoff: 'hand-off', released: 'released', expired: 'expired', queued: 'queued', left: 'left queue', gap: 'gap' };

  // eventTime is when e happened on the browser's clock: events from the
  // watch carry cluster time, shown once the offset is known.
  function eventTime(e) {
    if (e.at) return fmtClock(e.at);
    if (e.atMs !== undefined && state.clockSkew !== undefined) return fmtClock(new Date(e.atMs + state.clockSkew));
    return '··:··:··';
  }

  function renderEvents() {
    const list = $('events');
    list.replaceChildren(...state.events.map((e) => {
      let what;
      if (e.note) {
        what = [e.note];
      } else {
        what = [el('code', {}, [e.key]), ' '];
        if (e.token) what.push(el('span', { class: 'tok' }, ['#' + e.token]), ' ');
        what.push(e.holder);
        if (e.kind === 'handoff' && e.from) what.push(' from ' + e.from);
        if (e.waited) what.push(' after waiting ' + fmtDuration(e.waited));
        if (e.reason) what.push(' (' + (e.reason === 'deadline' ? 'gave up' : e.reason) + ')');
        if (e.old) what.push(' again, was #' + e.old);
      }
      return el('li', { class: 'event', 'data-kind': e.kind, 'data-key': e.key || '' }, [
        el('span', { class: 'time' }, [eventTime(e)]),
        el('span', { class: 'kind kind-' + e.kind }, [KIND_LABEL[e.kind] || e.kind]),
        el('span', { class: 'what', title: e.note || e.key + ': token ' + e.token + ', ' + e.holder }, what),
      ]);
    }));
    $('events-empty').hidden = state.events.length > 0;
  }

  // --- rates ---

  function sample(o) {
    const s = o.stats;
    const last = state.samples[state.samples.length - 1];
    const cur = { nowMs: o.now_ms, grants: s.grants, handoffs: s.handoffs, releases: s.releases, expiries: s.expiries };
    // Another leader, or a restart, starts its counters anew.
    if (last) {
      if (cur.grants < last.grants || cur.releases < last.releases || cur.expiries < last.expiries) state.samples = [];
      else if (cur.nowMs <= last.nowMs) return;
    }
    state.samples.push(cur);
    if (state.samples.length > RATE_SAMPLES + 1) state.samples.shift();
  }

  const SERIES = ['grants', 'handoffs', 'expiries', 'releases'];

  function renderRates() {
    const svg = $('chart-rates');
    const { w, h } = size(svg);
    const m = { l: 34, r: 8, t: 10, b: 20 };
    const pts = [];
    // Each point is the rate over the last two seconds or so, not over one
    // poll: a second with one grant and the next with none is one grant a
    // second, not a saw.
    let j = 0;
    for (let i = 1; i < state.samples.length; i++) {
      const b = state.samples[i];
      if (b.nowMs - state.samples[0].nowMs < RATE_SPAN_MS) continue; // too short to be a rate
      while (j < i - 1 && b.nowMs - state.samples[j + 1].nowMs >= RATE_SPAN_MS) j++;
      const a = state.samples[j];
      const dt = (b.nowMs - a.nowMs) / 1000;
      const p = { nowMs: b.nowMs };
      for (const k of SERIES) p[k] = dt > 0 ? Math.max(0, b[k] - a[k]) / dt : 0;
      pts.push(p);
    }
    const kids = [];
    const windowMs = RATE_SAMPLES * POLL_MS;
    const end = pts.length ? pts[pts.length - 1].nowMs : 0;
    let top = 1;
    for (const p of pts) for (const k of SERIES) top = Math.max(top, p[k]);
    top = niceCeil(top);
    const x = (t) => m.l + (w - m.l - m.r) * (1 - (end - t) / windowMs);
    const y = (v) => h - m.b - (h - m.t - m.b) * (v / top);
    for (const v of [0, top / 2, top]) {
      kids.push(el('line', { class: v === 0 ? 'axis' : 'grid-line', x1: m.l, x2: w - m.r, y1: y(v), y2: y(v) }, [], SVG));
      kids.push(el('text', { x: m.l - 6, y: y(v) + 3.5, 'text-anchor': 'end' }, [fmtRate(v)], SVG));
    }
    const spanS = windowMs / 1000;
    for (const s of [spanS, spanS / 2, 0]) {
      const label = s === 0 ? 'now' : '−' + (s >= 60 ? Math.round(s / 60) + 'm' : Math.round(s) + 's');
      kids.push(el('text', { x: x(end - s * 1000), y: h - 5, 'text-anchor': s === spanS ? 'start' : s === 0 ? 'end' : 'middle' }, [label], SVG));
    }
    if (pts.length < 2) {
      kids.push(el('text', { class: 'nodata', x: (w + m.l) / 2, y: h / 2, 'text-anchor': 'middle' }, ['Collecting…'], SVG));
    } else {
      for (const k of SERIES) {
        const d = pts.map((p) => x(p.nowMs).toFixed(1) + ',' + y(p[k]).toFixed(1)).join(' ');
        kids.push(el('polyline', { class: 'series s-' + k, points: d, 'data-series': k }, [], SVG));
      }
    }
    svg.replaceChildren(...kids);
    $('rates-window').textContent = 'The last ' + (windowMs >= 60000 ? Math.round(windowMs / 60000) + ' minutes' : Math.round(windowMs / 1000) + ' seconds') + ', from the leader’s counters, as rates over 2 s.';
  }

  // --- histograms ---

  // renderHistogram draws hst in its buckets; for waits, now (the waits
  // under way: {total, waitedMs}) are drawn on top as open bars, since a
  // wait is counted only once it is granted.
  function renderHistogram(svg, hst, kind, sumEl, now) {
    const { w, h } = size(svg);
    const m = { l: 8, r: 8, t: 16, b: 20 };
    const kids = [];
    const counts = hst.counts || [];
    const bounds = hst.bounds_ms || [];
    const n = counts.length;
    const waiting = now ? now.total : 0;
    const open = new Array(n).fill(0);
    if (now && n) {
      for (const ms of now.waitedMs) {
        let i = bounds.findIndex((b) => ms <= b);
        if (i < 0) i = bounds.length;
        open[Math.min(i, n - 1)]++;
      }
    }
    const openCount = open.reduce((a, b) => a + b, 0);
    if ((!hst.count || !n) && !openCount) {
      kids.push(el('line', { class: 'axis', x1: m.l, x2: w - m.r, y1: h - m.b, y2: h - m.b }, [], SVG));
      const text = kind === 'hold' ? 'No lease has ended yet' : waiting ? waiting + ' waiting, none granted yet' : 'Nobody has waited yet';
      kids.push(el('text', { class: 'nodata', x: w / 2, y: h / 2, 'text-anchor': 'middle' }, [text], SVG));
      svg.replaceChildren(...kids);
      sumEl.textContent = waiting ? waiting + ' waiting now' : '';
      return;
    }
    const top = Math.max(1, ...counts.map((c, i) => c + open[i]));
    const slot = (w - m.l - m.r) / n;
    const bw = Math.max(2, slot * 0.72);
    const ph = (c) => (c ? Math.max(1.5, (h - m.t - m.b) * (c / top)) : 0);
    for (let i = 0; i < n; i++) {
      const c = counts[i];
      const bh = ph(c);
      const oh = ph(open[i]);
      const x0 = m.l + i * slot + (slot - bw) / 2;
      const label = i < bounds.length ? '≤' + fmtBound(bounds[i]) : '>' + fmtBound(bounds[bounds.length - 1]);
      if (c) {
        kids.push(el('rect', { class: 'bar' + (kind === 'wait' ? ' wait' : ''), x: x0, y: h - m.b - bh, width: bw, height: bh, rx: 2, 'data-count': c }, [el('title', {}, [label + ': ' + c + (kind === 'wait' ? ' granted after waiting' : '')], SVG)], SVG));
      }
      if (open[i]) {
        kids.push(el('rect', { class: 'bar now', x: x0 + 0.75, y: h - m.b - bh - oh + 0.75, width: Math.max(0.5, bw - 1.5), height: Math.max(0.5, oh - 1.5), rx: 2, 'data-count': open[i] }, [el('title', {}, [label + ': ' + open[i] + ' waiting now'], SVG)], SVG));
      }
      if (c || open[i]) kids.push(el('text', { class: 'bar-label', x: x0 + bw / 2, y: h - m.b - bh - oh - 3, 'text-anchor': 'middle' }, [String(c + open[i])], SVG));
      if (i % 2 === 0 || slot > 40) kids.push(el('text', { x: x0 + bw / 2, y: h - 5, 'text-anchor': 'middle' }, [label], SVG));
    }
    kids.push(el('line', { class: 'axis', x1: m.l, x2: w - m.r, y1: h - m.b, y2: h - m.b }, [], SVG));
    svg.replaceChildren(...kids);
    const noun = kind === 'hold' ? (hst.count === 1 ? ' lease' : ' leases') : (hst.count === 1 ? ' wait' : ' waits');
    const parts = [];
    if (hst.count) parts.push(hst.count + noun + ', mean ' + fmtDuration(hst.sum_ms / hst.count));
    if (waiting) parts.push(waiting + ' waiting now');
    sumEl.textContent = parts.join(' · ');
  }

  // --- members ---

  function renderMembers(mb) {
    if (mb.node) $('node').textContent = 'node ' + mb.node;
    const rows = (mb.members || []).map((m) => el('tr', { class: m.id === mb.node ? 'self' : '', 'data-node': m.id, 'data-state': m.state || '' }, [
      el('td', { class: 'node-id' }, [m.id]),
      el('td', { class: 'addr' }, [el('div', {}, [m.client_addr ? el('a', { href: location.protocol + '//' + m.client_addr + '/ui/', title: m.id + '’s dashboard' }, [m.client_addr]) : 'client address not known yet']), el('div', { class: 'raft' }, ['raft ' + m.raft_addr])]),
      el('td', {}, [el('span', { class: 'role' + (m.leader ? ' leader' : '') }, [m.leader ? 'leader' : String(m.suffrage || '').toLowerCase()]), ...memberHealth(m, mb)]),
    ]));
    $('members-body').replaceChildren(...rows);
    $('cluster-id').textContent = mb.cluster_id ? 'cluster ' + mb.cluster_id.slice(0, 8) : '';
    $('cluster-id').title = mb.cluster_id || '';
    const noLeader = !mb.removed && (!!mb.no_leader || !mb.leader);
    $('stat-leader').textContent = noLeader ? 'none' : mb.leader;
    $('stat-leader').dataset.state = noLeader ? 'none' : 'known';
    const n = (mb.members || []).length;
    const down = (mb.members || []).filter((m) => m.state === 'unreachable').length;
    const sub = !noLeader ? [mb.leader_addr, n + (n === 1 ? ' node' : ' nodes')] : ['no leader: nothing is granted'];
    if (down) sub.push(down + ' unreachable');
    $('stat-leader-sub').textContent = sub.filter(Boolean).join(' · ');
    if (mb.applied_time_ms) clusterTimeSeen(mb.applied_time_ms);
  }

  // memberHealth is a member's health as the leader sees it, when the
  // server reports it: its state, when the leader last heard from it and
  // how far behind its log was then.
  function memberHealth(m, mb) {
    if (!m.state) return [];
    const out = [];
    if (m.state !== 'leader') out.push(el('span', { class: 'health', 'data-state': m.state, title: healthTitle(m, mb) }, [m.state]));
    const facts = [];
    const self = m.id === mb.node;
    if (self && mb.role) facts.push([mb.role, mb.term ? 'term ' + mb.term : '', 'applied ' + mb.applied_index].filter(Boolean).join(' · '));
    if (m.last_contact_ms !== undefined && m.last_contact_ms !== null) facts.push('heard ' + fmtDuration(m.last_contact_ms) + ' ago' + (mb.local ? ' by ' + mb.node : ''));
    else if (mb.local && !self && m.state === 'unknown') facts.push('never heard from by ' + mb.node);
    if (m.lag_entries !== undefined && m.lag_entries !== null) facts.push(m.lag_entries === 0 ? 'up to date' : m.lag_entries + (m.lag_entries === 1 ? ' entry' : ' entries') + ' behind');
    if (facts.length) out.push(el('div', { class: 'health-facts' }, [facts.join(' · ')]));
    return out;
  }

  function healthTitle(m, mb) {
    let from = mb.health_from ? 'as ' + mb.health_from + ' (the leader) sees it' : 'no leader’s view could be had';
    if (mb.local) from = 'as ' + mb.node + ' itself last heard from it: no leader’s view could be had';
    if (mb.local && m.state === 'healthy') return 'heard from within ' + fmtDuration(mb.unreachable_after_ms) + ', ' + from;
    if (m.state === 'unreachable') return 'not heard from for over ' + fmtDuration(mb.unreachable_after_ms) + ', ' + from;
    if (m.state === 'unknown') return 'not known: ' + from;
    return 'answering the leader’s heartbeats, ' + from;
  }

  // --- bits ---

  function el(tag, attrs, kids, ns) {
    const e = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, String(attrs[k]));
    for (const c of kids || []) e.append(c);
    return e;
  }

  function size(svg) {
    const r = svg.getBoundingClientRect();
    const w = Math.max(200, Math.round(r.width) || 600);
    const h = Math.max(120, Math.round(r.height) || 180);
    svg.setAttribute('viewBox', '0 0 ' + w + ' ' + h);
    return { w, h };
  }

  function setLive(st, text) {
    $('live').dataset.state = st;
    $('live-text').textContent = text;
  }

  function banner(kind, text, action, href, linkText, reason) {
    const b = $('banner');
    if (!kind) { b.hidden = true; b.replaceChildren(); delete b.dataset.reason; return; }
    b.dataset.kind = kind;
    if (reason) b.dataset.reason = reason; else delete b.dataset.reason;
    const kids = [text];
    if (href) kids.push(el('a', { href }, [linkText]), '.');
    if (action) {
      const btn = el('button', { type: 'button', class: 'quiet' }, [action]);
      btn.addEventListener('click', () => askToken(''));
      kids.push(btn);
    }
    b.replaceChildren(...kids);
    b.hidden = false;
  }

  function fmtRemaining(ms) {
    if (ms >= 60000) {
      const s = Math.floor(ms / 1000);
      return Math.floor(s / 60) + 'm ' + String(s % 60).padStart(2, '0') + 's';
    }
    return (ms / 1000).toFixed(1) + 's';
  }

  function fmtDuration(ms) {
    if (!(ms >= 0)) return '–';
    if (ms < 1000) return Math.round(ms) + 'ms';
    if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 1 : 0) + 's';
    if (ms < 3600000) return Math.floor(ms / 60000) + 'm ' + Math.round((ms % 60000) / 1000) + 's';
    return (ms / 3600000).toFixed(1) + 'h';
  }

  function fmtBound(ms) {
    if (ms < 1000) return Math.round(ms) + 'ms';
    if (ms < 100000) return Math.round(ms / 1000) + 's';
    return (ms / 60000).toFixed(1) + 'm';
  }

  function fmtRate(v) {
    if (v === 0) return '0';
    return v >= 10 ? String(Math.round(v)) : v.toFixed(1).replace(/\.0$/, '');
  }

  function fmtClock(d) {
    return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':');
  }

  function niceCeil(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const f of [1, 2, 5, 10]) if (v <= f * p) return f * p;
    return 10 * p;
  }

  // --- start ---

  function start() {
    $('prefix').value = state.prefix;
    let debounce = 0;
    $('prefix').addEventListener('input', () => {
      clearTimeout(debounce);
      debounce = setTimeout(() => {
        state.prefix = $('prefix').value.trim();
        state.prev = null; // a new baseline: a changed filter is no event
        restartWatch();
        const u = new URL(location.href);
        if (state.prefix) u.searchParams.set('prefix', state.prefix); else u.searchParams.delete('prefix');
        history.replaceState(null, '', u);
        schedule(0);
      }, 250);
    });
    $('auth-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const t = $('auth-token').value.trim();
      if (!t) return;
      setToken(t);
      state.paused = false;
      state.prev = null;
      $('auth').hidden = true;
      $('main').hidden = false;
      setLive('connecting', 'connecting…');
      schedule(0);
      restartWatch();
    });
    $('signout').addEventListener('click', () => {
      setToken('');
      state.prev = null;
      schedule(0);
    });
    const host = location.host || '127.0.0.1:7470';
    $('empty-curl').textContent = "curl -s -X POST " + host + "/v1/acquire -d '{\"key\":\"demo\",\"holder\":\"me\",\"ttl_ms\":30000}'";
    if (host !== '127.0.0.1:7470' && host !== 'localhost:7470') {
      document.querySelector('#empty pre code').textContent = 'fencelock lock demo --addr ' + host + ' -- sleep 30';
    }
    setToken(token());
    $('poll-every').textContent = POLL_MS === 1000 ? 'every second' : 'every ' + POLL_MS / 1000 + ' s';
    $('events-source').textContent = 'seen between polls';
    $('events-source').title = 'Derived from what changed between two answers of /v1/overview';
    renderRates();
    renderHistogram($('chart-hold'), {}, 'hold', $('hold-sum'));
    renderHistogram($('chart-wait'), {}, 'wait', $('wait-sum'));
    setInterval(tick, 100);
    restartWatch();
    window.addEventListener('resize', () => {
      renderRates();
    });
    poll();
  }

  start();
})();
