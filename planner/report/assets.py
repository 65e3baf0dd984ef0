"""The page's inline stylesheet and script (no external resources of any kind).

The script does two things: the step list (filter and pages of rows, rendered from the JSON the
page embeds, so long plans stay responsive) and a tooltip over the memory curves (step, op and
bytes live per layer at the pointer).
"""

CSS = """
:root { --fg: #1d1d1f; --muted: #666; --line: #ddd; --bg-alt: #f6f6f8; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       margin: 0; background: #fff; }
header { padding: 16px 28px 8px; border-bottom: 1px solid var(--line); }
header h1 { font-size: 20px; margin: 0 0 4px; }
header .ids { color: var(--muted); font-size: 12px; word-break: break-all; }
nav a { margin-right: 14px; color: #1f4e79; text-decoration: none; }
nav { margin-top: 8px; }
main { padding: 8px 28px 40px; max-width: 1120px; }
section { margin-top: 22px; }
h2 { font-size: 17px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 14px; margin: 16px 0 6px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; min-width: 200px;
        background: var(--bg-alt); }
.card .k { color: var(--muted); font-size: 12px; }
.card .v { font-size: 16px; font-weight: 600; }
.card .s { font-size: 12px; color: var(--muted); }
.ok { color: #1e7d32; } .bad { color: #c0392b; }
table { border-collapse: collapse; margin: 6px 0; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 8px; text-align: left;
         vertical-align: top; }
th { background: var(--bg-alt); font-weight: 600; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 8px 0 18px; }
figure svg { max-width: 100%; height: auto; display: block; }
figcaption { color: var(--muted); font-size: 12px; margin-top: 4px; }
svg text { font-family: system-ui, sans-serif; }
svg text:not([fill]) { fill: #333; }
svg .budget-label { fill: #c0392b; font-weight: 600; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: 12px; margin: 4px 0; }
.legend span.sw { display: inline-block; width: 12px; height: 12px; margin-right: 4px;
                  vertical-align: -2px; border: 1px solid rgba(0,0,0,.15); }
.legend span.ln { display: inline-block; width: 22px; height: 0; margin-right: 4px;
                  vertical-align: 3px; border-top: 2px solid; }
.note { background: #fff8e1; border-left: 3px solid #f0b400; padding: 4px 8px; font-size: 12px; }
#tooltip { position: fixed; pointer-events: none; background: rgba(20,20,20,.92); color: #fff;
           font-size: 12px; padding: 6px 8px; border-radius: 4px; white-space: pre;
           display: none; z-index: 10; }
.steps-controls { display: flex; gap: 10px; align-items: center; flex-wrap: wrap;
                  margin: 6px 0; }
.steps-controls input[type=search] { width: 260px; }
#step-table td.detail { color: var(--muted); font-size: 12px; max-width: 460px;
                        overflow-wrap: anywhere; }
tr.k-recompute td { background: #fde4e4; }
tr.k-copy td { background: #f3eadf; }
tr.k-free td { color: var(--muted); }
details > summary { cursor: pointer; font-weight: 600; }
details.notes > summary { font-weight: normal; color: var(--muted); }
details.notes ul { margin: 2px 0; padding-left: 18px; }
"""

JS = r"""
(function () {
  'use strict';
  function readJson(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }
  var UNITS = [['GiB', 1073741824], ['MiB', 1048576], ['KiB', 1024]];
  function fmtBytes(n) {
    for (var i = 0; i < UNITS.length; i++) {
      if (Math.abs(n) >= UNITS[i][1]) { return (n / UNITS[i][1]).toFixed(2) + ' ' + UNITS[i][0]; }
    }
    return n + ' B';
  }
  var steps = readJson('step-data') || [];
  var memory = readJson('memory-data') || {};
  var layerNames = readJson('layer-names') || {};

  // ---- step list: filter + pages ----
  var body = document.getElementById('step-rows');
  var info = document.getElementById('step-info');
  var filterText = document.getElementById('step-filter');
  var filterKind = document.getElementById('step-kind');
  var prev = document.getElementById('step-prev');
  var next = document.getElementById('step-next');
  var PAGE = 200;
  var page = 0;
  var shown = steps;
  function cell(tr, text, cls) {
    var td = document.createElement('td');
    td.textContent = text;
    if (cls) { td.className = cls; }
    tr.appendChild(td);
  }
  function renderSteps() {
    if (!body) { return; }
    var pages = Math.max(1, Math.ceil(shown.length / PAGE));
    page = Math.min(Math.max(page, 0), pages - 1);
    var start = page * PAGE;
    var rows = shown.slice(start, start + PAGE);
    var frag = document.createDocumentFragment();
    rows.forEach(function (r) {
      var tr = document.createElement('tr');
      tr.className = 'k-' + r[1];
      cell(tr, String(r[0]), 'n');
      cell(tr, r[1]);
      cell(tr, r[2]);
      cell(tr, r[3] + (r[6] ? ' [' + r[6] + ']' : ''));
      cell(tr, fmtBytes(r[4]), 'n');
      cell(tr, r[5], 'detail');
      frag.appendChild(tr);
    });
    body.replaceChildren(frag);
    info.textContent = shown.length ? ('steps ' + (start + 1) + '\u2013' + (start + rows.length) +
      ' of ' + shown.length + (shown.length < steps.length ? ' matching (' + steps.length +
      ' in all)' : '')) : 'no step matches';
    prev.disabled = page === 0;
    next.disabled = page >= pages - 1;
  }
  function applyFilter() {
    var text = filterText.value.trim().toLowerCase();
    var kind = filterKind.value;
    shown = steps.filter(function (r) {
      if (kind && r[1] !== kind) { return false; }
      if (!text) { return true; }
      return (r[2] + ' ' + r[3] + ' ' + r[5] + ' ' + r[6]).toLowerCase().indexOf(text) >= 0;
    });
    page = 0;
    renderSteps();
  }
  if (body) {
    filterText.addEventListener('input', applyFilter);
    filterKind.addEventListener('change', applyFilter);
    prev.addEventListener('click', function () { page -= 1; renderSteps(); });
    next.addEventListener('click', function () { page += 1; renderSteps(); });
    renderSteps();
  }

  // ---- tooltip over the memory curves ----
  var tip = document.getElementById('tooltip');
  function spanAt(starts, step) {
    var lo = 0, hi = starts.length - 1;
    while (lo < hi) {
      var mid = (lo + hi + 1) >> 1;
      if (starts[mid] <= step) { lo = mid; } else { hi = mid - 1; }
    }
    return lo;
  }
  Array.prototype.forEach.call(document.querySelectorAll('svg.memory'), function (svg) {
    var curve = memory[svg.getAttribute('data-device')];
    var area = svg.querySelector('.hover-area');
    if (!curve || !area || !tip) { return; }
    var x0 = parseFloat(svg.getAttribute('data-x0'));
    var x1 = parseFloat(svg.getAttribute('data-x1'));
    var n = Math.max(1, parseInt(svg.getAttribute('data-steps'), 10));
    area.addEventListener('mousemove', function (ev) {
      var box = svg.getBoundingClientRect();
      var vx = (ev.clientX - box.left) * svg.viewBox.baseVal.width / box.width;
      var step = Math.min(n - 1, Math.max(0, Math.floor((vx - x0) / (x1 - x0) * n)));
      var i = spanAt(curve.starts, step);
      var shownStep = curve.steps[i];
      var lines = ['step ' + shownStep + (steps[shownStep] ? ': ' + steps[shownStep][1] + ' ' +
        steps[shownStep][3] : ''), 'live ' + fmtBytes(curve.total[i]) + ' (budget ' +
        fmtBytes(curve.budget) + ')'];
      Object.keys(curve.layers).forEach(function (name) {
        var v = curve.layers[name][i];
        if (v) { lines.push('  ' + (layerNames[name] || name) + ': ' + fmtBytes(v)); }
      });
      tip.textContent = lines.join('\n');
      tip.style.display = 'block';
      tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8) + 'px';
      tip.style.top = (ev.clientY + 14) + 'px';
    });
    area.addEventListener('mouseleave', function () { tip.style.display = 'none'; });
  });
})();
"""
