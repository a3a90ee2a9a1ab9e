// Notifio dashboard: polls api/status every 2 s and renders it; countdowns tick client-side
// from the server's deadlines, corrected by the offset between the JSON's `now` and this
// browser's clock. Everything from the server is inserted as text (never as HTML): listing
// titles come from third-party sites. Searches are added, edited, paused and deleted through
// the JSON API (docs/dashboard.md), which edits the config file; the next poll shows the
// result, so the page never reloads.
'use strict';

const POLL_MS = 2000;
const TICK_MS = 250; // re-render countdowns 4x a second so each whole second shows on time
const token = new URLSearchParams(location.search).get('token');

let offsetMs = 0;        // server clock minus browser clock
let lastOk = 0;          // browser time of the last good poll
const seenListings = new Set();
let firstRender = true;

const KIND_PHRASE = {
  challenge: 'showed a challenge page',
  rate_limited: 'said we asked too often (rate limited)',
  denied: 'refused access (denied)',
  error: 'failed to answer (server or network error)',
};
const KIND_LABEL = {
  challenge: 'challenge page',
  rate_limited: 'rate limited',
  denied: 'denied',
  error: 'error',
};
const STATE_LABEL = {
  ok: 'ok', clear: 'clear', waiting: 'waiting', probing: 'probing',
  session_expired: 'session expired', search_gone: 'search gone', layout_unknown: 'layout unknown',
  paused: 'paused',
};
// Cards whose delete is waiting for a confirmation, by search name.
const confirming = new Set();
let lastView = null;

function serverNow() { return Date.now() + offsetMs; }

// 7m 12s / 45s / 1h 05m. Rounded up: "1s" is shown until the deadline passes.
function fmtDuration(ms) {
  const total = Math.max(0, Math.ceil(ms / 1000));
  const h = Math.floor(total / 3600), m = Math.floor((total % 3600) / 60), s = total % 60;
  if (h > 0) return h + 'h ' + String(m).padStart(2, '0') + 'm';
  if (m > 0) return m + 'm ' + String(s).padStart(2, '0') + 's';
  return s + 's';
}

function fmtAgo(at) {
  const ms = serverNow() - at;
  if (ms < 5000) return 'just now';
  return fmtDuration(ms) + ' ago';
}

function fmtClock(at) {
  return new Date(at - offsetMs).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
}

function ordinal(n) {
  const v = n % 100;
  const suf = (v >= 11 && v <= 13) ? 'th' : ({ 1: 'st', 2: 'nd', 3: 'rd' }[n % 10] || 'th');
  return n + suf;
}

function label(state) { return STATE_LABEL[state] || String(state || 'unknown').replace(/_/g, ' '); }

// Only http(s) links are followed: a site-supplied `javascript:` URL must never become a link.
function safeUrl(u) {
  try {
    const url = new URL(u, location.href);
    return (url.protocol === 'http:' || url.protocol === 'https:') ? url.href : null;
  } catch (_) { return null; }
}

// el('p', {class: 'x'}, 'text', childNode, ...): builds DOM with text-only content.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    node.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

function link(href, text, cls) {
  const safe = safeUrl(href);
  if (!safe) return el('span', { class: cls }, text);
  return el('a', { href: safe, class: cls, target: '_blank', rel: 'noopener noreferrer' }, text);
}

// A span the ticker keeps current: counts down to (or up from) a server timestamp.
function countdown(at, cls, mode) {
  return el('span', { class: cls, 'data-at': at, 'data-mode': mode || 'left' }, '');
}

function fmtPrice(l) {
  if (l.price === null || l.price === undefined) return null;
  const cur = l.currency || '';
  if (/^[A-Z]{3}$/.test(cur)) {
    try {
      return new Intl.NumberFormat(undefined, { style: 'currency', currency: cur, maximumFractionDigits: 0 }).format(l.price);
    } catch (_) { /* unknown code: fall through */ }
  }
  return new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 }).format(l.price) + (cur ? ' ' + cur : '');
}

// The plain-language reason for a search's state: the server's if it sent one, else built
// from the site's entry ("idealista.com showed a challenge page; 3rd refusal; next try in 7m 12s").
function reasonFor(s, site) {
  if (s.reason) return [s.reason];
  const name = s.site;
  switch (s.state) {
    case 'ok':
      return s.last_checked_at ? null : ['Not checked yet.'];
    case 'waiting':
    case 'probing': {
      if (site && site.kind) {
        const parts = [name + ' ' + (KIND_PHRASE[site.kind] || ('refused (' + site.kind + ')'))];
        if (site.failures > 0) parts.push('; ' + ordinal(site.failures) + ' refusal');
        if (s.state === 'probing') {
          parts.push('; its wait is over and this search is the one probe checking whether it has cleared');
          return parts;
        }
        const at = site.next_retry_at || s.next_check_at;
        if (at) parts.push('; next try ', countdown(at, 'reason-countdown', 'in'));
        if (site.lengthened_by_retry_after) parts.push(' (the site\'s Retry-After lengthened the wait)');
        return parts;
      }
      if (site && site.state === 'probing') return ['Parked while another search on ' + name + ' probes whether the site has cleared.'];
      return ['Waiting for its turn on ' + name + '.'];
    }
    case 'session_expired':
      return [name + ' logged us out (session expired): run `notifio login ' + name + '` (browser sites) or export fresh cookies into its cookies file; checks on this site are paused.'];
    case 'search_gone':
      return ['The search page is gone (404/410); this search is paused. Check its URL in the config.'];
    case 'layout_unknown':
      return ['The page loaded but its result list was not recognised (layout unknown); this search is paused until the site profile is updated.'];
    default:
      return null;
  }
}

// "checked about every 40 s now · typically notified within 20 s": the running watcher's plan
// for a search (its share of its site's budget, or its own interval), as `notifio status`
// says it.
function about(seconds) {
  if (seconds < 90) return Math.max(1, Math.round(seconds)) + ' s';
  if (seconds < 5400) return Math.round(seconds / 60) + ' min';
  return Math.round(seconds / 3600) + ' h';
}

function planLine(s) {
  if (s.checks_per_hour == null || s.expected_delay_s == null) return null;
  return 'checked about every ' + about(3600 / Math.max(s.checks_per_hour, 1e-6))
    + ' now · typically notified within ' + about(s.expected_delay_s);
}

// What a search's listings did lately, as two rows of inline SVG bars: new listings per day
// (the last 14 days, today on the right) and how long each of its latest gone listings
// stayed online. No script, nothing external.
function lifecycleChart(s) {
  const days = s.new_per_day || [];
  const online = s.online_s || [];
  if (!days.some((n) => n > 0) && !online.length) return null;
  const ns = 'http://www.w3.org/2000/svg';
  const bars = (vals, w, h, cls, title) => {
    const svg = document.createElementNS(ns, 'svg');
    svg.setAttribute('class', 'bars ' + cls);
    svg.setAttribute('width', w); svg.setAttribute('height', h);
    svg.setAttribute('viewBox', '0 0 ' + w + ' ' + h);
    svg.setAttribute('role', 'img');
    svg.setAttribute('aria-label', title);
    const hi = Math.max(...vals, 1);
    const step = w / Math.max(vals.length, 1);
    vals.forEach((v, i) => {
      const r = document.createElementNS(ns, 'rect');
      const bh = v > 0 ? Math.max(1, (v / hi) * (h - 1)) : 0;
      r.setAttribute('x', (i * step + 0.5).toFixed(1));
      r.setAttribute('y', (h - bh).toFixed(1));
      r.setAttribute('width', Math.max(step - 1, 1).toFixed(1));
      r.setAttribute('height', bh.toFixed(1));
      svg.append(r);
    });
    return svg;
  };
  const total = days.reduce((a, b) => a + b, 0);
  const box = el('div', { class: 'lifecycle', 'data-testid': 'lifecycle' },
    el('p', { class: 'muted' }, bars(days, 112, 24, 'new', 'new listings per day: ' + days.join(', ')),
      ' ' + total + ' new in ' + days.length + ' days'));
  if (s.stays_online_s != null) {
    box.append(el('p', { class: 'muted', 'data-testid': 'stays-online' },
      bars(online.map((x) => Math.log1p(x)), 112, 24, 'online', 'time online of the latest gone listings'),
      ' Listings here stay online ' + about(s.stays_online_s) + ' on average (' + online.length + ' gone)'));
  }
  return box;
}

function renderSearch(s, site) {
  const reason = reasonFor(s, site);
  const plan = planLine(s);
  const card = el('article', {
    class: 'card search state-' + s.state, 'data-search-id': s.id, 'data-search-name': s.name, 'data-testid': 'search-' + s.id,
    'data-state': s.state,
  },
    el('div', { class: 'row' }, el('h3', { class: 'name' }, s.name),
      el('span', { class: 'badge state', 'data-testid': 'search-state' }, label(s.state))),
    el('p', { class: 'meta' }, link(s.url, s.site, 'site'),
      s.found != null
        ? el('span', { class: 'muted', 'data-testid': 'found' }, ' · ' + s.found + ' found · ' + (s.matched != null ? s.matched : s.found) + ' match')
        : null),
    reason ? el('p', { class: 'reason', 'data-testid': 'reason' }, ...reason) : null,
    plan ? el('p', { class: 'muted plan', 'data-testid': 'plan' }, plan) : null,
    el('p', { class: 'next' }, 'Next check: ',
      s.next_check_at ? countdown(s.next_check_at, 'countdown') : el('span', { class: 'countdown' }, 'not scheduled')),
    el('p', { class: 'last', 'data-testid': 'last-check' },
      s.last_checked_at
        ? el('span', {}, 'Last check ', el('time', { title: fmtClock(s.last_checked_at) }, countdown(s.last_checked_at, 'ago', 'ago')),
          ' · ', el('span', { class: 'outcome' }, label(s.last_outcome || 'unknown')))
        : 'Never checked'),
  );
  card.append(searchActions(s));
  const chart = lifecycleChart(s);
  if (chart) card.append(chart);
  const listings = s.new_listings || [];
  if (listings.length) {
    const ul = el('ul', { class: 'listings', 'data-testid': 'listings' });
    for (const l of listings) {
      const key = s.id + '/' + l.id;
      const fresh = !firstRender && !seenListings.has(key);
      seenListings.add(key);
      const price = fmtPrice(l);
      ul.append(el('li', { 'data-listing-id': l.id, class: fresh ? 'fresh' : null },
        link(l.url, l.title || ('Listing ' + l.id), 'title'),
        price ? ' · ' : null, price ? el('span', { class: 'price' }, price) : null,
        ' · ', el('span', { class: 'muted' }, 'found ', countdown(l.first_seen, 'ago', 'ago'))));
    }
    card.append(ul);
  } else {
    card.append(el('p', { class: 'muted listings-empty' }, 'No new listings yet.'));
  }
  return card;
}

function searchActions(s) {
  const box = el('div', { class: 'actions' });
  if (confirming.has(s.name)) {
    box.append('Delete this search? Its history stays. ',
      el('button', { type: 'button', class: 'danger', 'data-action': 'delete-yes', 'data-name': s.name, 'data-testid': 'confirm-delete' }, 'Delete'),
      el('button', { type: 'button', 'data-action': 'delete-no', 'data-name': s.name }, 'Keep'));
    return box;
  }
  box.append(
    el('button', { type: 'button', 'data-action': 'edit', 'data-name': s.name, 'data-testid': 'edit' }, 'Edit'),
    s.state === 'paused'
      ? el('button', { type: 'button', 'data-action': 'resume', 'data-name': s.name, 'data-testid': 'resume' }, 'Resume')
      : el('button', { type: 'button', 'data-action': 'pause', 'data-name': s.name, 'data-testid': 'pause' }, 'Pause'),
    el('button', { type: 'button', 'data-action': 'delete', 'data-name': s.name, 'data-testid': 'delete' }, 'Delete'));
  return box;
}

function renderSite(t) {
  const waiting = t.state === 'waiting' || t.state === 'probing';
  const dl = el('dl', {},
    el('dt', {}, 'Kind'), el('dd', { class: 'kind' }, t.kind ? (KIND_LABEL[t.kind] || t.kind) : '—'),
    el('dt', {}, 'Rung'), el('dd', { class: 'rung' }, t.kind && t.rungs
      ? Math.min(t.failures, t.rungs) + ' of ' + t.rungs + (t.failures > t.rungs ? ' (top; ' + ordinal(t.failures) + ' refusal)' : '')
      : '—'),
    el('dt', {}, 'Next retry'), el('dd', {}, waiting && t.next_retry_at
      ? countdown(t.next_retry_at, 'countdown')
      : el('span', { class: 'countdown' }, t.state === 'probing' ? 'probing now' : '—')),
    el('dt', {}, 'Budget'), el('dd', { 'data-testid': 'budget' }, t.budget
      ? t.budget + (t.requests_last_hour != null ? ' · ' + t.requests_last_hour + ' requests in the last hour' : '')
      : '—'),
  );
  const card = el('article', {
    class: 'card site state-' + t.state, 'data-site': t.site, 'data-testid': 'site', 'data-state': t.state,
  },
    el('div', { class: 'row' }, el('h3', {}, t.site), el('span', { class: 'badge state' }, label(t.state))),
    dl,
    t.lengthened_by_retry_after
      ? el('p', { class: 'ra', 'data-testid': 'retry-after' }, 'Retry-After lengthened the wait'
        + (t.retry_after_ms ? ' (the site asked for ' + fmtDuration(t.retry_after_ms) + ')' : ''))
      : null,
    t.hint ? el('p', { class: 'muted hint', 'data-testid': 'site-hint' }, t.hint) : null,
  );
  // A site that needs the user (a challenge, an expired session) and is read in the browser:
  // the same window `notifio login` opens. Only offered where a window can be shown.
  const needsUser = t.state === 'session_expired' || t.kind === 'challenge';
  if (t.login && needsUser) {
    card.append(el('div', { class: 'actions' },
      el('button', { type: 'button', class: 'primary', 'data-action': 'login', 'data-site': t.site, 'data-testid': 'open-in-browser' }, 'Open in browser')));
  }
  const tl = t.timeline || [];
  if (tl.length) {
    const line = el('div', { class: 'timeline', 'data-testid': 'timeline', 'aria-label': 'last checks, oldest first' });
    for (const o of tl) {
      const known = ['ok', 'challenge', 'rate_limited', 'denied', 'error'].includes(o);
      line.append(el('span', { class: 'dot o-' + (known ? o : 'other'), title: label(o) }));
    }
    card.append(line);
  }
  return card;
}

function renderChannel(c) {
  const card = el('article', {
    class: 'card channel state-' + c.state, 'data-channel': c.name, 'data-testid': 'channel', 'data-state': c.state,
  },
    el('div', { class: 'row' }, el('h3', {}, c.name), el('span', { class: 'badge state' }, label(c.state))),
    el('p', { class: 'meta' }, (c.sent || 0) + ' delivered · ' + (c.pending || 0) + ' waiting'
      , c.last_sent_at ? el('span', {}, ' · last ', countdown(c.last_sent_at, 'ago', 'ago')) : null),
  );
  if (c.state === 'failed') {
    card.append(el('p', { class: 'reason', 'data-testid': 'channel-error' },
      'Failed permanently: ' + (c.last_error || 'unknown error') + '. Fix its settings and restart notifio; its messages wait.'));
  } else if (c.state === 'retrying') {
    card.append(el('p', { class: 'reason', 'data-testid': 'channel-error' }, (c.last_error || 'delivery failed') + ' · next try ',
      c.next_attempt_at ? countdown(c.next_attempt_at, 'in') : 'soon'));
  }
  return card;
}

function render(view) {
  lastView = view;
  const sites = new Map((view.sites || []).map((t) => [t.site, t]));
  const cfg = view.config || {};
  const ce = document.getElementById('config-error');
  ce.textContent = cfg.error ? 'The config file has a problem; the running config stays in force until it is fixed:\n' + cfg.error : '';
  ce.hidden = !cfg.error;
  const rs = document.getElementById('restart');
  const restart = cfg.restart_needed || [];
  rs.textContent = restart.length ? 'Restart notifio watch to apply: ' + restart.join(', ') + ' (the running values stay in force).' : '';
  rs.hidden = !restart.length;

  const warn = document.getElementById('warnings');
  warn.replaceChildren(...(view.warnings || []).map((w) => el('li', {}, w)));
  warn.hidden = !(view.warnings || []).length;

  const searches = view.searches || [];
  document.getElementById('searches').replaceChildren(...(searches.length
    ? searches.map((s) => renderSearch(s, sites.get(s.site)))
    : [el('p', { class: 'empty' }, 'No searches configured.')]));

  document.getElementById('sites').replaceChildren(...((view.sites || []).length
    ? view.sites.map(renderSite)
    : [el('p', { class: 'empty' }, 'No sites yet.')]));

  document.getElementById('channels').replaceChildren(...((view.channels || []).length
    ? view.channels.map(renderChannel)
    : [el('p', { class: 'empty' }, 'No channels yet.')]));

  const sn = document.getElementById('soonest');
  sn.replaceChildren(...(view.soonest ? ['A waiting site is next retried in ', countdown(view.soonest, 'soonest-countdown')] : []));

  const r = view.retry || {};
  document.getElementById('retry').replaceChildren(
    'Requests ' + (r.requests || 0) + ' · retried ' + (r.retried || 0)
    + ' (' + ((r.retry_rate || 0) * 100).toFixed(1) + '% in the last hour) · retry attempts ' + (r.attempts || 0)
    + ' · failed after retries ' + (r.final_failures || 0));

  firstRender = false;
  tick();
}

function tick() {
  const now = serverNow();
  for (const node of document.querySelectorAll('[data-at]')) {
    const at = Number(node.getAttribute('data-at'));
    let text;
    const mode = node.getAttribute('data-mode');
    if (mode === 'ago') text = fmtAgo(at);
    else if (mode === 'in') text = at > now ? 'in ' + fmtDuration(at - now) : 'now';
    else text = at > now ? fmtDuration(at - now) : 'due now';
    if (node.textContent !== text) node.textContent = text;
  }
  const conn = document.getElementById('conn');
  if (lastOk && Date.now() - lastOk > 3 * POLL_MS && !conn.classList.contains('down')) {
    conn.textContent = 'no update for ' + fmtDuration(Date.now() - lastOk) + ', retrying…';
  }
}

function authHeaders() { return token ? { Authorization: 'Bearer ' + token } : {}; }

// A JSON request to the API: resolves to { ok, status, body }.
async function api(method, path, body) {
  const headers = Object.assign({ 'Content-Type': 'application/json' }, authHeaders());
  const resp = await fetch(path, { method, headers, cache: 'no-store', body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  try { data = await resp.json(); } catch (_) { data = { error: 'HTTP ' + resp.status }; }
  return { ok: resp.ok, status: resp.status, body: data };
}

function showError(form, slot, result) {
  const box = form.querySelector('[data-testid="' + slot + '"]');
  for (const input of form.querySelectorAll('input')) input.removeAttribute('aria-invalid');
  if (!result) { box.textContent = ''; return; }
  const err = result.body || {};
  const field = err.field || '';
  const name = { 'listing.selector': 'selector', 'listing.id_attr': 'id_attr', listing: 'selector' }[field] || field;
  const input = name ? form.querySelector('input[name="' + name + '"]') : null;
  if (input) input.setAttribute('aria-invalid', 'true');
  box.textContent = (field ? field + ': ' : '') + (err.error || 'HTTP ' + result.status);
}

// ---------------------------------------------------------------- the add form

const addForm = document.getElementById('add');
let profileInfo = null;

function listingOf(form) {
  const sel = form.elements.selector.value.trim();
  // A site without a profile is read by auto mode unless a card selector pins it.
  if (!profileInfo || !(profileInfo.needs_listing || profileInfo.auto) || !sel) return undefined;
  const id = form.elements.id_attr.value.trim();
  return id ? { selector: sel, id_attr: id } : { selector: sel };
}

async function lookUpProfile() {
  const url = addForm.elements.url.value.trim();
  const line = addForm.querySelector('[data-testid="profile"]');
  const generic = addForm.querySelector('fieldset.generic');
  if (!url) { line.textContent = ''; generic.hidden = true; profileInfo = null; return; }
  const resp = await fetch('api/profile?url=' + encodeURIComponent(url), { headers: authHeaders(), cache: 'no-store' });
  const data = await resp.json().catch(() => ({}));
  // The form moved on (another URL, or reset after an add) while this was asked.
  if (addForm.elements.url.value.trim() !== url) return;
  if (!resp.ok) { line.textContent = data.error || ''; generic.hidden = true; profileInfo = null; return; }
  profileInfo = data;
  generic.hidden = !(data.needs_listing || data.auto);
  line.textContent = data.auto
    ? data.site + ' has no built-in profile: it is read automatically, by the structure of its page. Preview shows what it finds; a card selector below pins it.'
    : data.site + ' is read with the ' + data.profile + ' profile' + (data.about ? ' — ' + data.about : '') + ' (' + ({ browser: 'in the browser', app: "through the app's request" }[data.fetch] || 'over HTTP') + ').';
  if (!addForm.elements.name.value.trim()) {
    try { addForm.elements.name.placeholder = new URL(url).hostname + new URL(url).pathname; } catch (_) { /* not a URL yet */ }
  }
}

addForm.elements.url.addEventListener('change', lookUpProfile);
addForm.elements.url.addEventListener('blur', lookUpProfile);

function renderPreview(box, r) {
  const head = el('p', { 'data-testid': 'preview-outcome', 'data-outcome': r.outcome },
    r.outcome === 'ok'
      ? (r.found + ' listing' + (r.found === 1 ? '' : 's') + ' found' + (r.status ? ' (HTTP ' + r.status + ')' : ''))
      : label(r.outcome) + (r.reason ? ': ' + r.reason : ''));
  const how = r.read === 'auto' || r.read === 'auto_fallback'
    ? el('p', { 'data-testid': 'preview-read', class: 'muted' },
      (r.read === 'auto' ? 'Read automatically' : 'The profile found no result list; read automatically') +
      (r.structure ? ': ' + r.structure + ' (paste it as the card selector to pin it)' : '') + '.')
    : null;
  const ul = el('ul', { 'data-testid': 'preview-listings' });
  for (const l of r.listings || []) {
    const price = fmtPrice(l);
    ul.append(el('li', { 'data-listing-id': l.id }, link(l.url, l.title || ('Listing ' + l.id), 'title'),
      price ? ' · ' : null, price ? el('span', { class: 'price' }, price) : null));
  }
  box.replaceChildren(...[head, how, ul].filter(Boolean));
}

addForm.addEventListener('click', async (ev) => {
  const b = ev.target.closest('button[data-action="preview"]');
  if (!b) return;
  await lookUpProfile();
  const box = addForm.querySelector('[data-testid="preview-result"]');
  box.replaceChildren(el('p', { class: 'muted' }, 'Asking the site (it waits for its turn)…'));
  const body = { url: addForm.elements.url.value.trim() };
  const listing = listingOf(addForm);
  if (listing) body.listing = listing;
  const r = await api('POST', 'api/preview', body);
  if (!r.ok) { box.replaceChildren(); showError(addForm, 'add-error', r); return; }
  showError(addForm, 'add-error', null);
  renderPreview(box, r.body);
});

addForm.addEventListener('submit', async (ev) => {
  ev.preventDefault();
  await lookUpProfile();
  const f = addForm.elements;
  const body = { name: f.name.value.trim() || f.name.placeholder, url: f.url.value.trim() };
  if (f.interval.value.trim()) body.interval = f.interval.value.trim();
  const listing = listingOf(addForm);
  if (listing) body.listing = listing;
  const r = await api('POST', 'api/searches', body);
  if (!r.ok) { showError(addForm, 'add-error', r); return; }
  showError(addForm, 'add-error', null);
  addForm.reset();
  addForm.elements.name.placeholder = 'e.g. Madrid under 1200';
  addForm.querySelector('[data-testid="profile"]').textContent = '';
  addForm.querySelector('[data-testid="preview-result"]').replaceChildren(
    el('p', { 'data-testid': 'added' }, 'Added “' + body.name + '”: its first check is a silent baseline.'));
  addForm.querySelector('fieldset.generic').hidden = true;
  profileInfo = null;
  poll(true);
});

// ---------------------------------------------------------------- edit, pause, delete

const editPanel = document.getElementById('edit-panel');
const editForm = document.getElementById('edit');
let editing = null; // { name, table }

async function openEditor(name) {
  const resp = await fetch('api/searches', { headers: authHeaders(), cache: 'no-store' });
  const data = await resp.json().catch(() => ({}));
  const table = (data.searches || []).find((t) => t.name === name);
  if (!table) return;
  editing = { name, table };
  const f = editForm.elements;
  f.name.value = table.name;
  f.interval.value = table.interval || '';
  const sel = editForm.querySelector('.generic-only');
  const listing = table.listing && typeof table.listing === 'object' ? table.listing : null;
  sel.hidden = !(listing && listing.selector);
  f.selector.value = listing && listing.selector ? listing.selector : '';
  const chans = editForm.querySelector('fieldset.channels');
  const names = data.channels || [];
  chans.hidden = names.length < 2;
  chans.replaceChildren(el('legend', {}, 'Notify on'), ...names.map((c) => el('label', {},
    el('input', { type: 'checkbox', name: 'channel', value: c, checked: !table.notify || table.notify.includes(c) ? 'checked' : null }), ' ' + c)));
  showError(editForm, 'edit-error', null);
  document.getElementById('h-edit').textContent = 'Edit “' + name + '”';
  editPanel.hidden = false;
  f.name.focus();
}

editForm.addEventListener('click', (ev) => {
  if (ev.target.closest('button[data-action="cancel"]')) { editPanel.hidden = true; editing = null; }
});

editForm.addEventListener('submit', async (ev) => {
  ev.preventDefault();
  if (!editing) return;
  const f = editForm.elements;
  const t = editing.table;
  const body = {};
  if (f.name.value.trim() !== t.name) body.name = f.name.value.trim();
  const interval = f.interval.value.trim();
  if (interval !== (t.interval || '')) body.interval = interval || null;
  if (t.listing && typeof t.listing === 'object' && t.listing.selector && f.selector.value.trim() !== t.listing.selector) {
    body.listing = Object.assign({}, t.listing, { selector: f.selector.value.trim() });
  }
  const boxes = [...editForm.querySelectorAll('input[name="channel"]')];
  if (boxes.length > 1) {
    const chosen = boxes.filter((b) => b.checked).map((b) => b.value);
    const all = chosen.length === boxes.length;
    const was = t.notify || null;
    if (all && was) body.notify = null;
    else if (!all && JSON.stringify(chosen) !== JSON.stringify(was)) body.notify = chosen;
  }
  const r = await api('PATCH', 'api/searches/' + encodeURIComponent(editing.name), body);
  if (!r.ok) { showError(editForm, 'edit-error', r); return; }
  editPanel.hidden = true;
  editing = null;
  poll(true);
});

document.addEventListener('click', async (ev) => {
  const b = ev.target.closest('#searches button[data-action], #sites button[data-action]');
  if (!b) return;
  const name = b.getAttribute('data-name');
  const action = b.getAttribute('data-action');
  if (action === 'edit') { openEditor(name); return; }
  if (action === 'delete') { confirming.add(name); if (lastView) render(lastView); return; }
  if (action === 'delete-no') { confirming.delete(name); if (lastView) render(lastView); return; }
  let r;
  if (action === 'delete-yes') {
    confirming.delete(name);
    r = await api('DELETE', 'api/searches/' + encodeURIComponent(name), {});
  } else if (action === 'pause' || action === 'resume') {
    r = await api('POST', 'api/searches/' + encodeURIComponent(name) + '/' + action, {});
  } else if (action === 'login') {
    const site = b.getAttribute('data-site');
    b.disabled = true;
    r = await api('POST', 'api/sites/' + encodeURIComponent(site) + '/login', {});
    b.disabled = false;
    const note = el('p', { class: 'reason', 'data-testid': 'login-note' }, r.ok ? r.body.message : (r.body.error || 'HTTP ' + r.status));
    b.closest('.card').append(note);
    return;
  }
  if (r && !r.ok) {
    const warn = document.getElementById('warnings');
    warn.hidden = false;
    warn.append(el('li', { 'data-testid': 'action-error' }, (r.body.error || 'HTTP ' + r.status)));
  }
  poll(true);
});

let pollTimer = null;
async function poll() {
  const conn = document.getElementById('conn');
  try {
    const headers = authHeaders();
    const resp = await fetch('api/status', { cache: 'no-store', headers });
    if (resp.status === 401) {
      conn.textContent = 'this dashboard needs its token: open it as /?token=…';
      conn.classList.add('down');
    } else if (!resp.ok) {
      throw new Error('HTTP ' + resp.status);
    } else {
      const view = await resp.json();
      offsetMs = view.now - Date.now();
      lastOk = Date.now();
      render(view);
      updateInboxSearches(view);
      conn.textContent = 'live · updated ' + new Date().toLocaleTimeString();
      conn.classList.remove('down');
    }
  } catch (e) {
    conn.textContent = 'cannot reach notifio (' + e.message + '), retrying…';
    conn.classList.add('down');
  }
  clearTimeout(pollTimer);
  pollTimer = setTimeout(poll, POLL_MS);
}


// ---------------------------------------------------------------- the listings inbox
// `api/listings` newest first, marked from here (buttons and keys) through
// `api/listings/state`; reloaded every INBOX_MS and after each mark. Twins on other sites
// come grouped as one flat ("also on").
const INBOX_MS = 10000;
const MARKS = [
  ['favourite', 'f', '★ favourite'],
  ['contacted', 'c', 'contacted'],
  ['seen', 's', 'seen'],
  ['hidden', 'h', 'hide'],
  ['new', 'n', 'new'],
];
let inboxRows = [];      // the listings shown, in order
let inboxSelected = null; // "site\u001fid" of the selected row
let inboxSelectedIndex = 0; // and its place in the list
let inboxPages = 1;
let inboxTimer = null;

function inboxKey(l) { return l.site + '\u001f' + l.id; }

function inboxParams() {
  const f = document.getElementById('inbox-filters');
  const p = new URLSearchParams();
  if (f.state.value) p.set('state', f.state.value);
  if (f.search.value) p.set('search', f.search.value);
  if (f.matched.checked) p.set('matched', 'true');
  if (f.gone.value) p.set('gone', f.gone.value);
  return p;
}

// A price-history sparkline: an inline SVG polyline, no script and nothing external.
function sparkline(prices) {
  if (!prices || prices.length < 2) return null;
  const ns = 'http://www.w3.org/2000/svg';
  const w = 80, h = 22;
  const vals = prices.map((p) => p[1]);
  const lo = Math.min(...vals), hi = Math.max(...vals);
  const pts = vals.map((v, i) => {
    const x = (i / (vals.length - 1)) * (w - 2) + 1;
    const y = hi === lo ? h / 2 : h - 2 - ((v - lo) / (hi - lo)) * (h - 4);
    return x.toFixed(1) + ',' + y.toFixed(1);
  }).join(' ');
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', 'spark');
  svg.setAttribute('width', w); svg.setAttribute('height', h);
  svg.setAttribute('viewBox', '0 0 ' + w + ' ' + h);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', 'price history: ' + vals.join(' → '));
  const line = document.createElementNS(ns, 'polyline');
  line.setAttribute('points', pts);
  line.setAttribute('fill', 'none');
  line.setAttribute('stroke', vals[vals.length - 1] < vals[0] ? 'var(--ok)' : 'var(--bad)');
  line.setAttribute('stroke-width', '1.5');
  svg.append(line);
  return svg;
}

function renderInboxRow(l) {
  const key = inboxKey(l);
  const img = l.image
    ? el('img', { class: 'thumb', src: l.image, alt: '', loading: 'lazy', referrerpolicy: 'no-referrer' })
    : el('span', { class: 'thumb' });
  const facts = [fmtPrice(l),
    l.price_per_m2 ? new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 }).format(l.price_per_m2) + '/m²' : null,
    l.rooms ? l.rooms + (l.rooms === 1 ? ' room' : ' rooms') : null,
    l.area_m2 ? l.area_m2 + ' m²' : null].filter(Boolean).join(' · ');
  const also = (l.also_on || []).map((t) => link(t.url, t.site, 'also'));
  const found = el('p', { class: 'found' }, 'on ' + l.site,
    also.length ? ' · also on ' : null, ...also.flatMap((a, i) => (i ? [', ', a] : [a])),
    ' · ' + (l.searches || []).join(', '),
    ' · first seen ', el('span', { title: fmtClock(l.first_seen) }, fmtAgo(l.first_seen)),
    l.gone_at ? el('span', { class: 'gone', 'data-testid': 'gone', title: 'gone ' + fmtClock(l.gone_at) },
      ' · gone after ' + about(l.online_s || 0)) : null);
  const marks = el('div', { class: 'marks' }, ...MARKS.map(([state, k, text]) =>
    el('button', { type: 'button', 'data-mark': state, 'aria-pressed': l.state === state ? 'true' : 'false', title: 'key ' + k }, text)));
  const li = el('li', {
    class: 'mark-' + l.state + (l.gone_at ? ' gone' : '') + (key === inboxSelected ? ' selected' : ''),
    'data-site': l.site, 'data-id': l.id, 'data-state': l.state, 'data-testid': 'inbox-listing',
  }, img,
    el('div', {}, link(l.url, l.title || '(untitled listing)', 'title'),
      el('p', { class: 'facts' }, facts, ' ', sparkline(l.prices)), found),
    marks);
  return li;
}

function renderInbox(data) {
  // A row that left the view (hidden, or marked out of the state shown) passes the
  // selection to the row that took its place, so the keys go on down the list.
  if (inboxSelected && !inboxRows.some((l) => inboxKey(l) === inboxSelected)) {
    const i = Math.min(inboxSelectedIndex, inboxRows.length - 1);
    inboxSelected = i >= 0 ? inboxKey(inboxRows[i]) : null;
  }
  inboxSelectedIndex = Math.max(0, inboxRows.findIndex((l) => inboxKey(l) === inboxSelected));
  const list = document.getElementById('inbox');
  list.replaceChildren(...inboxRows.map(renderInboxRow));
  const shown = inboxRows.length;
  document.getElementById('inbox-summary').textContent = data.total === 0
    ? 'No listings here yet.'
    : shown + ' of ' + data.total + ' listings, newest first';
  document.getElementById('inbox-more').hidden = data.page * data.per_page >= data.total;
  const q = inboxParams().toString();
  for (const a of document.querySelectorAll('#inbox-filters [data-export]')) {
    const base = a.dataset.export === 'atom' ? 'feed.atom' : 'api/listings/export.' + a.dataset.export;
    const p = new URLSearchParams(q);
    if (token) p.set('token', token);
    a.href = base + (p.toString() ? '?' + p : '');
  }
}

async function loadInbox() {
  clearTimeout(inboxTimer);
  try {
    const rows = [];
    let data = null;
    for (let page = 1; page <= inboxPages; page++) {
      const p = inboxParams();
      p.set('page', page);
      const resp = await fetch('api/listings?' + p, { headers: authHeaders(), cache: 'no-store' });
      // A dashboard without the watcher's API (a read-only one) has no inbox.
      if (resp.status === 404) { document.getElementById('inbox-panel').hidden = true; return; }
      if (!resp.ok) throw new Error('HTTP ' + resp.status);
      data = await resp.json();
      rows.push(...data.listings);
      if (page * data.per_page >= data.total) break;
    }
    inboxRows = rows;
    if (data) renderInbox(data);
  } catch (e) {
    document.getElementById('inbox-summary').textContent = 'cannot load the listings (' + e.message + ')';
  }
  inboxTimer = setTimeout(loadInbox, INBOX_MS);
}

async function markListing(site, id, state) {
  const r = await api('POST', 'api/listings/state', { site, id, state });
  if (!r.ok) {
    document.getElementById('inbox-summary').textContent = r.body.error || ('HTTP ' + r.status);
    return;
  }
  const row = inboxRows.find((l) => l.site === site && l.id === id);
  if (row) row.state = state;
  loadInbox();
}

function selectInbox(delta) {
  if (!inboxRows.length) return;
  let i = inboxRows.findIndex((l) => inboxKey(l) === inboxSelected);
  i = i < 0 ? 0 : Math.max(0, Math.min(inboxRows.length - 1, i + delta));
  inboxSelected = inboxKey(inboxRows[i]);
  inboxSelectedIndex = i;
  for (const li of document.querySelectorAll('#inbox li')) {
    const on = li.dataset.site + '\u001f' + li.dataset.id === inboxSelected;
    li.classList.toggle('selected', on);
    if (on) li.scrollIntoView({ block: 'nearest' });
  }
}

document.getElementById('inbox').addEventListener('click', (ev) => {
  const b = ev.target.closest('button[data-mark]');
  const li = ev.target.closest('li');
  if (!li) return;
  inboxSelected = li.dataset.site + '\u001f' + li.dataset.id;
  inboxSelectedIndex = inboxRows.findIndex((l) => inboxKey(l) === inboxSelected);
  for (const other of document.querySelectorAll('#inbox li')) other.classList.toggle('selected', other === li);
  if (b) markListing(li.dataset.site, li.dataset.id, b.dataset.mark);
});

document.addEventListener('keydown', (ev) => {
  if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
  if (ev.target.closest && ev.target.closest('input, select, textarea')) return;
  if (ev.key === 'j' || ev.key === 'ArrowDown') { selectInbox(1); ev.preventDefault(); return; }
  if (ev.key === 'k' || ev.key === 'ArrowUp') { selectInbox(-1); ev.preventDefault(); return; }
  const row = inboxRows.find((l) => inboxKey(l) === inboxSelected);
  if (!row) return;
  if (ev.key === 'o' || ev.key === 'Enter') {
    const url = safeUrl(row.url);
    if (url) window.open(url, '_blank', 'noopener,noreferrer');
    return;
  }
  const mark = MARKS.find(([, k]) => k === ev.key);
  if (mark) { markListing(row.site, row.id, mark[0]); ev.preventDefault(); }
});

document.getElementById('inbox-filters').addEventListener('change', () => { inboxPages = 1; loadInbox(); });
document.getElementById('inbox-more').addEventListener('click', () => { inboxPages += 1; loadInbox(); });

// The search filter offers the searches the status view shows.
function updateInboxSearches(view) {
  const sel = document.getElementById('inbox-filters').search;
  const names = (view.searches || []).map((s) => s.name);
  const have = Array.from(sel.options).slice(1).map((o) => o.value);
  if (names.join('\u001f') === have.join('\u001f')) return;
  const current = sel.value;
  sel.replaceChildren(el('option', { value: '' }, 'all'), ...names.map((n) => el('option', { value: n }, n)));
  sel.value = names.includes(current) ? current : '';
}

setInterval(tick, TICK_MS);
poll();
loadInbox();
