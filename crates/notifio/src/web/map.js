// Notifio's map (docs/commutes.md): the inbox's listings as markers coloured by their state,
// the user's places, and the areas from which each place is reached within its limit, on a
// slippy map written for this page: no library and no CDN, so the dashboard still serves
// everything itself. Web Mercator tiles come from one configurable server (OpenStreetMap's by
// default, attributed); when they do not load (offline, refused) the markers still show on a
// plain background. Everything from a site is inserted as text, positions are set through
// the CSSOM (the page's CSP allows no inline style), and a tile request sends the dashboard's
// origin only (never its path or its token) as the tile servers' policies ask a Referer.
//
// Use: `const map = NotifioMap.create(element, { tiles: { url, attribution, attributionUrl } })`,
// then `map.setListings([...])`, `map.setPlaces([...])`, `map.setAreas([...])`, `map.fit()`.
// Drawing waits for the next animation frame, so the calls of one task draw (and load tiles)
// once, for the view they end with.
// A click on a listing opens its card; its buttons dispatch `notifio-map-mark` (detail
// `{ site, id, state }`) and a click dispatches `notifio-map-select` (`{ site, id }`), both
// bubbling from the map's element, for the inbox code to handle.
'use strict';

(function () {
  const TILE = 256;
  const MIN_ZOOM = 2;
  const MAX_LAT = 85.0511287798; // Web Mercator's edge
  const EARTH_CIRCUMFERENCE_M = 40075016.686;
  const FIT_MAX_ZOOM = 16;       // fitting never zooms closer than a few streets
  const FIT_PADDING = 40;        // pixels kept free around the markers
  const WHEEL_STEP = 100;        // wheel delta (pixels) per zoom level
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const DEFAULT_TILES = {
    url: 'https://tile.openstreetmap.org/{z}/{x}/{y}.png',
    attribution: '© OpenStreetMap contributors',
    attributionUrl: 'https://www.openstreetmap.org/copyright',
    maxZoom: 19,
  };
  const STATES = ['new', 'favourite', 'contacted', 'seen', 'gone'];
  const STATE_LABEL = { new: 'new', favourite: '★ favourite', contacted: 'contacted', seen: 'seen', hidden: 'hidden', gone: 'gone' };
  const MARKS = [['favourite', '★ favourite'], ['contacted', 'contacted'], ['seen', 'seen'], ['hidden', 'hide']];

  // ---------------------------------------------------------------- projection

  // World pixels of a point at zoom z: x east from the antimeridian, y south from the top.
  function project(lat, lon, z) {
    const scale = TILE * Math.pow(2, z);
    const phi = Math.max(-MAX_LAT, Math.min(MAX_LAT, lat)) * Math.PI / 180;
    return {
      x: (lon + 180) / 360 * scale,
      y: (1 - Math.log(Math.tan(phi) + 1 / Math.cos(phi)) / Math.PI) / 2 * scale,
    };
  }

  function unproject(x, y, z) {
    const scale = TILE * Math.pow(2, z);
    const lon = x / scale * 360 - 180;
    const n = Math.PI - 2 * Math.PI * y / scale;
    return { lat: 180 / Math.PI * Math.atan(Math.sinh(n)), lon: ((lon + 540) % 360) - 180 };
  }

  // Metres per screen pixel at a latitude and zoom.
  function metresPerPixel(lat, z) {
    return EARTH_CIRCUMFERENCE_M * Math.cos(lat * Math.PI / 180) / (TILE * Math.pow(2, z));
  }

  // ---------------------------------------------------------------- small helpers

  function safeUrl(u) {
    try {
      const url = new URL(u, location.href);
      return (url.protocol === 'http:' || url.protocol === 'https:') ? url.href : null;
    } catch (_) { return null; }
  }

  // A tile template must be http(s) and name {z}, {x} and {y}; anything else is refused and
  // the map goes without tiles.
  function tileTemplate(url) {
    if (typeof url !== 'string' || !/\{z\}/.test(url) || !/\{x\}/.test(url) || !/\{y\}/.test(url)) return null;
    return safeUrl(url.replace(/\{[zxys]\}/g, '0')) ? url : null;
  }

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

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    return node;
  }

  function validPoint(p) {
    return p && Number.isFinite(p.lat) && Number.isFinite(p.lon) &&
      Math.abs(p.lat) <= 90 && Math.abs(p.lon) <= 180 && !(p.lat === 0 && p.lon === 0);
  }

  // A listing's point: `place: {lat, lon, precision}` as `check --json` writes it.
  function listingPoint(l) {
    const p = l && l.place;
    return validPoint(p) ? p : null;
  }

  function listingState(l) {
    if (l.gone_at) return 'gone';
    return STATE_LABEL[l.state] ? l.state : 'new';
  }

  function listingKey(l) { return String(l.site) + '\u001f' + String(l.id); }

  function fmtPrice(l) {
    if (l.price === null || l.price === undefined || !Number.isFinite(Number(l.price))) return null;
    const cur = l.currency || '';
    if (/^[A-Z]{3}$/.test(cur)) {
      try {
        return new Intl.NumberFormat(undefined, { style: 'currency', currency: cur, maximumFractionDigits: 0 }).format(l.price);
      } catch (_) { /* an unknown code: plain number below */ }
    }
    return new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 }).format(l.price) + (cur ? ' ' + cur : '');
  }

  // ---------------------------------------------------------------- the map

  function create(container, options) {
    const opts = options || {};
    const tilesOpt = Object.assign({}, DEFAULT_TILES, opts.tiles || {});
    const template = tileTemplate(tilesOpt.url);
    const maxZoom = Math.max(MIN_ZOOM, Math.min(22, Number(tilesOpt.maxZoom) || 19));
    const view = { lat: 50, lon: 10, zoom: 4 };
    let listings = [], places = [], areas = [];
    let openKey = null;
    let frame = 0;
    const tiles = new Map(); // "z/x/y" → img

    container.classList.add('nmap');
    container.setAttribute('tabindex', '0');
    container.setAttribute('role', 'application');
    container.setAttribute('aria-label', 'map of the listings');
    if (!template) container.classList.add('nmap-offline');

    const tileLayer = el('div', { class: 'nmap-tiles', 'aria-hidden': 'true' });
    const overlay = svg('svg', { class: 'nmap-overlay', 'data-testid': 'map-overlay' });
    const areaLayer = svg('g', { class: 'nmap-areas' });
    const placeLayer = svg('g', { class: 'nmap-places' });
    const listingLayer = svg('g', { class: 'nmap-listings' });
    overlay.append(areaLayer, listingLayer, placeLayer);
    const popup = el('div', { class: 'nmap-popup', 'data-testid': 'map-popup', role: 'dialog', hidden: true });
    const zoomIn = el('button', { type: 'button', title: 'zoom in', 'aria-label': 'zoom in', 'data-map': 'in' }, '+');
    const zoomOut = el('button', { type: 'button', title: 'zoom out', 'aria-label': 'zoom out', 'data-map': 'out' }, '−');
    const fitButton = el('button', { type: 'button', title: 'show every listing', 'aria-label': 'show every listing', 'data-map': 'fit' }, '⤢');
    const controls = el('div', { class: 'nmap-controls' }, zoomIn, zoomOut, fitButton);
    const attribution = el('div', { class: 'nmap-attribution', 'data-testid': 'map-attribution' });
    const legend = el('div', { class: 'nmap-legend', 'data-testid': 'map-legend' });
    if (tilesOpt.attribution) {
      const href = safeUrl(tilesOpt.attributionUrl || '');
      attribution.append(href
        ? el('a', { href, target: '_blank', rel: 'noopener noreferrer' }, tilesOpt.attribution)
        : String(tilesOpt.attribution));
    }
    container.append(tileLayer, overlay, popup, controls, legend, attribution);

    function size() { return { w: container.clientWidth || 1, h: container.clientHeight || 1 }; }

    // The view's top-left corner in world pixels.
    function origin() {
      const s = size();
      const c = project(view.lat, view.lon, view.zoom);
      return { x: c.x - s.w / 2, y: c.y - s.h / 2 };
    }

    // Screen pixels of a point, on the copy of the world nearest the view's centre.
    function screen(lat, lon, o) {
      const world = TILE * Math.pow(2, view.zoom);
      const p = project(lat, lon, view.zoom);
      const cx = o.x + size().w / 2;
      p.x += world * Math.round((cx - p.x) / world);
      return { x: p.x - o.x, y: p.y - o.y };
    }

    function tileUrl(z, x, y) {
      return template
        .replace('{z}', z).replace('{x}', x).replace('{y}', y)
        .replace('{s}', 'abc'[(x + y) % 3]);
    }

    function renderTiles(o) {
      if (!template) { tileLayer.replaceChildren(); tiles.clear(); return; }
      const s = size();
      const z = view.zoom, n = Math.pow(2, z);
      const keep = new Set();
      for (let ty = Math.floor(o.y / TILE); ty <= Math.floor((o.y + s.h) / TILE); ty++) {
        if (ty < 0 || ty >= n) continue;
        for (let tx = Math.floor(o.x / TILE); tx <= Math.floor((o.x + s.w) / TILE); tx++) {
          const key = z + '/' + tx + '/' + ty;
          keep.add(key);
          let img = tiles.get(key);
          if (!img) {
            const wx = ((tx % n) + n) % n;
            img = el('img', { class: 'nmap-tile', alt: '', draggable: 'false', decoding: 'async' });
            img.referrerPolicy = 'strict-origin';
            img.addEventListener('error', () => {
              img.classList.add('nmap-failed');
              container.classList.add('nmap-offline');
            });
            img.addEventListener('load', () => container.classList.remove('nmap-offline'));
            img.src = tileUrl(z, wx, ty);
            tiles.set(key, img);
            tileLayer.append(img);
          }
          img.style.left = Math.round(tx * TILE - o.x) + 'px';
          img.style.top = Math.round(ty * TILE - o.y) + 'px';
        }
      }
      for (const [key, img] of tiles) {
        if (!keep.has(key)) { img.remove(); tiles.delete(key); }
      }
    }

    function renderOverlay(o) {
      const s = size();
      overlay.setAttribute('width', s.w);
      overlay.setAttribute('height', s.h);
      overlay.setAttribute('viewBox', '0 0 ' + s.w + ' ' + s.h);
      for (const g of areaLayer.children) {
        for (const c of g.children) {
          if (c.tagName !== 'circle') continue;
          const lat = Number(c.dataset.lat), lon = Number(c.dataset.lon);
          const p = screen(lat, lon, o);
          c.setAttribute('cx', p.x.toFixed(1));
          c.setAttribute('cy', p.y.toFixed(1));
          c.setAttribute('r', Math.max(1, Number(c.dataset.radius) / metresPerPixel(lat, view.zoom)).toFixed(1));
        }
      }
      for (const m of [...listingLayer.children, ...placeLayer.children]) {
        const p = screen(Number(m.dataset.lat), Number(m.dataset.lon), o);
        m.setAttribute('transform', 'translate(' + p.x.toFixed(1) + ',' + p.y.toFixed(1) + ')');
      }
      if (openKey) {
        const l = listings.find((x) => listingKey(x) === openKey);
        const pt = l && listingPoint(l);
        if (pt) {
          const p = screen(pt.lat, pt.lon, o);
          popup.style.left = Math.round(p.x) + 'px';
          popup.style.top = Math.round(p.y) + 'px';
        }
      }
    }

    function render() {
      frame = 0;
      const o = origin();
      renderTiles(o);
      renderOverlay(o);
      zoomIn.disabled = view.zoom >= maxZoom;
      zoomOut.disabled = view.zoom <= MIN_ZOOM;
      container.dataset.zoom = view.zoom;
    }

    function schedule() { if (!frame) frame = requestAnimationFrame(render); }

    function setView(lat, lon, zoom) {
      view.lat = Math.max(-MAX_LAT, Math.min(MAX_LAT, lat));
      view.lon = ((lon + 540) % 360) - 180;
      view.zoom = Math.max(MIN_ZOOM, Math.min(maxZoom, Math.round(zoom)));
      schedule();
    }

    // Zoom by `delta` levels keeping the point under screen pixel (px, py) in place.
    function zoomAround(delta, px, py) {
      const z = Math.max(MIN_ZOOM, Math.min(maxZoom, view.zoom + delta));
      if (z === view.zoom) return;
      const s = size(), o = origin();
      const at = unproject(o.x + px, o.y + py, view.zoom);
      const p = project(at.lat, at.lon, z);
      const c = unproject(p.x - px + s.w / 2, p.y - py + s.h / 2, z);
      setView(c.lat, c.lon, z);
    }

    function panBy(dx, dy) {
      const c = project(view.lat, view.lon, view.zoom);
      const to = unproject(c.x + dx, c.y + dy, view.zoom);
      view.lat = Math.max(-MAX_LAT, Math.min(MAX_LAT, to.lat));
      view.lon = to.lon;
      schedule();
    }

    // Every listing and place in view, as close as FIT_MAX_ZOOM allows.
    function fit() {
      const pts = listings.map(listingPoint).filter(Boolean).concat(places.filter(validPoint));
      if (!pts.length) { setView(view.lat, view.lon, view.zoom); return; }
      const s = size();
      for (let z = Math.min(FIT_MAX_ZOOM, maxZoom); z >= MIN_ZOOM; z--) {
        const ps = pts.map((p) => project(p.lat, p.lon, z));
        const xs = ps.map((p) => p.x), ys = ps.map((p) => p.y);
        const w = Math.max(...xs) - Math.min(...xs), h = Math.max(...ys) - Math.min(...ys);
        if (z === MIN_ZOOM || (w <= s.w - 2 * FIT_PADDING && h <= s.h - 2 * FIT_PADDING)) {
          const c = unproject((Math.max(...xs) + Math.min(...xs)) / 2, (Math.max(...ys) + Math.min(...ys)) / 2, z);
          setView(c.lat, c.lon, z);
          return;
        }
      }
    }

    function renderLegend() {
      const counts = {};
      let unplaced = 0;
      for (const l of listings) {
        if (!listingPoint(l)) { unplaced++; continue; }
        const st = listingState(l);
        counts[st] = (counts[st] || 0) + 1;
      }
      const items = STATES.filter((st) => counts[st]).map((st) =>
        el('span', { class: 'nmap-key state-' + st }, el('i', {}), STATE_LABEL[st] + ' ' + counts[st]));
      if (places.length) items.push(el('span', { class: 'nmap-key place' }, el('i', {}), 'your places'));
      if (unplaced) {
        items.push(el('span', { class: 'nmap-unplaced', 'data-testid': 'map-unplaced' },
          unplaced + (unplaced === 1 ? ' listing has' : ' listings have') + ' no place'));
      }
      legend.replaceChildren(...items);
      legend.hidden = !items.length;
    }

    function setListings(list) {
      listings = Array.isArray(list) ? list.slice() : [];
      const nodes = [];
      for (const l of listings) {
        const pt = listingPoint(l);
        if (!pt) continue;
        const st = listingState(l);
        const approx = pt.precision === 'district' || pt.precision === 'city';
        const g = svg('g', {
          class: 'nmap-listing state-' + st + (approx ? ' approx' : ''),
          'data-testid': 'map-listing', 'data-key': listingKey(l), 'data-site': l.site, 'data-id': l.id,
          'data-state': st, 'data-lat': pt.lat, 'data-lon': pt.lon, tabindex: '0', role: 'button',
        });
        const title = svg('title');
        title.textContent = (l.title || '(untitled listing)') + (fmtPrice(l) ? ' · ' + fmtPrice(l) : '');
        g.append(title, svg('circle', { r: 8 }));
        nodes.push(g);
      }
      // Favourites on top: drawn last.
      nodes.sort((a, b) => (a.dataset.state === 'favourite') - (b.dataset.state === 'favourite'));
      listingLayer.replaceChildren(...nodes);
      if (openKey && !listings.some((l) => listingKey(l) === openKey)) close();
      else if (openKey) open(openKey);
      renderLegend();
      schedule();
    }

    function setPlaces(list) {
      places = (Array.isArray(list) ? list : []).filter(validPoint);
      placeLayer.replaceChildren(...places.map((p) => {
        const g = svg('g', { class: 'nmap-place', 'data-testid': 'map-place', 'data-lat': p.lat, 'data-lon': p.lon, 'data-name': p.name });
        const title = svg('title');
        title.textContent = String(p.name || '') + (p.by ? ' (' + p.by + ')' : '');
        const label = svg('text', { x: 13, y: 4 });
        label.textContent = String(p.name || '');
        g.append(title, svg('path', { d: 'M0,-10 L10,0 L0,10 L-10,0 Z' }), label);
        return g;
      }));
      renderLegend();
      schedule();
    }

    // Areas: `[{ place, minutes, circles: [{lat, lon, radius_m}] }]`, one colour per place.
    function setAreas(list) {
      areas = Array.isArray(list) ? list : [];
      areaLayer.replaceChildren(...areas.map((a, i) => {
        const g = svg('g', { class: 'nmap-area area-' + (i % 4), 'data-testid': 'map-area', 'data-place': a.place });
        const title = svg('title');
        title.textContent = 'within ' + a.minutes + ' min of ' + a.place;
        g.append(title);
        for (const c of (a.circles || [])) {
          if (!validPoint(c) || !(c.radius_m > 0)) continue;
          g.append(svg('circle', { 'data-lat': c.lat, 'data-lon': c.lon, 'data-radius': c.radius_m }));
        }
        return g;
      }));
      schedule();
    }

    function open(key) {
      const l = listings.find((x) => listingKey(x) === key);
      if (!l || !listingPoint(l)) { close(); return; }
      openKey = key;
      const st = listingState(l);
      const href = safeUrl(l.url);
      const title = href
        ? el('a', { href, target: '_blank', rel: 'noopener noreferrer', class: 'title' }, l.title || '(untitled listing)')
        : el('span', { class: 'title' }, l.title || '(untitled listing)');
      const facts = [fmtPrice(l), l.rooms ? l.rooms + (l.rooms === 1 ? ' room' : ' rooms') : null,
        l.area_m2 ? l.area_m2 + ' m²' : null].filter(Boolean).join(' · ');
      const marks = el('div', { class: 'marks' }, ...MARKS.map(([state, text]) =>
        el('button', { type: 'button', 'data-mark': state, 'aria-pressed': l.state === state ? 'true' : 'false' }, text)));
      popup.replaceChildren(...[
        el('button', { type: 'button', class: 'nmap-close', 'aria-label': 'close', 'data-map': 'close' }, '×'),
        title,
        facts ? el('p', { class: 'facts' }, facts) : null,
        l.commute ? el('p', { class: 'commute', 'data-testid': 'map-commute' }, l.commute) : null,
        el('p', { class: 'found' }, 'on ' + l.site + ' · ' + STATE_LABEL[st]),
        marks,
      ].filter(Boolean));
      popup.dataset.key = key;
      popup.hidden = false;
      for (const m of listingLayer.children) m.classList.toggle('open', m.dataset.key === key);
      schedule();
    }

    function close() {
      openKey = null;
      popup.hidden = true;
      for (const m of listingLayer.children) m.classList.remove('open');
    }

    function emit(name, detail) {
      container.dispatchEvent(new CustomEvent(name, { bubbles: true, detail }));
    }

    function choose(marker) {
      open(marker.dataset.key);
      emit('notifio-map-select', { site: marker.dataset.site, id: marker.dataset.id });
    }

    // ------------------------------------------------------------ input

    let drag = null;
    container.addEventListener('pointerdown', (ev) => {
      if (ev.button !== 0 || ev.target.closest('.nmap-popup, .nmap-controls, .nmap-attribution')) return;
      drag = { x: ev.clientX, y: ev.clientY, lastX: ev.clientX, lastY: ev.clientY, moved: false, target: ev.target, id: ev.pointerId };
    });
    container.addEventListener('pointermove', (ev) => {
      if (!drag || ev.pointerId !== drag.id) return;
      if (!drag.moved && Math.hypot(ev.clientX - drag.x, ev.clientY - drag.y) > 4) {
        drag.moved = true;
        container.setPointerCapture(ev.pointerId);
        container.classList.add('nmap-dragging');
      }
      if (drag.moved) {
        panBy(drag.lastX - ev.clientX, drag.lastY - ev.clientY);
        drag.lastX = ev.clientX; drag.lastY = ev.clientY;
      }
    });
    function endDrag(ev) {
      if (!drag || ev.pointerId !== drag.id) return;
      const d = drag;
      drag = null;
      container.classList.remove('nmap-dragging');
      if (d.moved || ev.type === 'pointercancel') return;
      const marker = d.target.closest && d.target.closest('.nmap-listing');
      if (marker) choose(marker); else close();
    }
    container.addEventListener('pointerup', endDrag);
    container.addEventListener('pointercancel', endDrag);

    let wheel = 0;
    container.addEventListener('wheel', (ev) => {
      ev.preventDefault();
      // Lines or pages: a level per notch; pixels: a level per WHEEL_STEP.
      wheel += ev.deltaMode === 0 ? ev.deltaY : Math.sign(ev.deltaY) * WHEEL_STEP;
      if (Math.abs(wheel) < WHEEL_STEP) return;
      const r = container.getBoundingClientRect();
      zoomAround(wheel < 0 ? 1 : -1, ev.clientX - r.left, ev.clientY - r.top);
      wheel = 0;
    }, { passive: false });

    controls.addEventListener('click', (ev) => {
      const b = ev.target.closest('button[data-map]');
      if (!b) return;
      const s = size();
      if (b.dataset.map === 'in') zoomAround(1, s.w / 2, s.h / 2);
      else if (b.dataset.map === 'out') zoomAround(-1, s.w / 2, s.h / 2);
      else fit();
    });

    popup.addEventListener('click', (ev) => {
      if (ev.target.closest('[data-map="close"]')) { close(); container.focus(); return; }
      const b = ev.target.closest('button[data-mark]');
      if (!b || !openKey) return;
      const l = listings.find((x) => listingKey(x) === openKey);
      if (l) emit('notifio-map-mark', { site: l.site, id: l.id, state: b.dataset.mark });
    });

    container.addEventListener('keydown', (ev) => {
      if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
      if (ev.target.closest('.nmap-popup')) { if (ev.key === 'Escape') { close(); container.focus(); } return; }
      const marker = ev.target.closest && ev.target.closest('.nmap-listing');
      const s = size();
      const step = { ArrowLeft: [-80, 0], ArrowRight: [80, 0], ArrowUp: [0, -80], ArrowDown: [0, 80] }[ev.key];
      if (marker && (ev.key === 'Enter' || ev.key === ' ')) choose(marker);
      else if (step) panBy(step[0], step[1]);
      else if (ev.key === '+' || ev.key === '=') zoomAround(1, s.w / 2, s.h / 2);
      else if (ev.key === '-') zoomAround(-1, s.w / 2, s.h / 2);
      else if (ev.key === 'Escape') close();
      else return;
      ev.stopPropagation();
      ev.preventDefault();
    });

    const resize = typeof ResizeObserver === 'function' ? new ResizeObserver(schedule) : null;
    if (resize) resize.observe(container);

    schedule();

    return {
      setListings, setPlaces, setAreas, fit, setView, open, close,
      get view() { return { lat: view.lat, lon: view.lon, zoom: view.zoom }; },
      destroy() {
        if (resize) resize.disconnect();
        if (frame) cancelAnimationFrame(frame);
        container.replaceChildren();
        container.classList.remove('nmap', 'nmap-offline');
      },
    };
  }

  window.NotifioMap = { create, project, unproject, DEFAULT_TILES };
})();
