// cdb ui's live page: polls /live.json and draws each chart the page's
// #charts names as a small SVG line chart: "a.b+c.d:label" draws the
// values at paths a.b and c.d as two lines. No inline script (the CSP
// forbids it), no library, no other origin.
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var W = 280, H = 80, PAD = 4;
  var root = document.getElementById("charts");
  var status = document.getElementById("live-status");
  var series = root.getAttribute("data-series").split("|").map(function (s) {
    var parts = s.split(":");
    return {
      paths: parts[0].split("+").map(function (p) { return p.split("."); }),
      label: parts[1]
    };
  });

  function value(sample, path) {
    var v = sample;
    for (var i = 0; i < path.length && v !== null && v !== undefined; i++) {
      v = v[path[i]];
    }
    return typeof v === "number" ? v : null;
  }

  function el(name, attrs, text) {
    var e = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) { e.textContent = text; }
    return e;
  }

  function round(v) { return v === null ? "n/a" : String(Math.round(v * 100) / 100); }

  function chart(s, samples) {
    var lines = s.paths.map(function (path) {
      return samples.map(function (x) { return value(x, path); });
    });
    var known = [].concat.apply([], lines).filter(function (v) { return v !== null; });
    var top = Math.max.apply(null, known.concat([1]));
    var lasts = lines.map(function (values) {
      var k = values.filter(function (v) { return v !== null; });
      return k.length ? k[k.length - 1] : null;
    });
    var fig = document.createElement("figure");
    var cap = document.createElement("figcaption");
    cap.textContent = s.label + ": " + lasts.map(round).join(" / ");
    var svg = el("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, "class": "chart" });
    svg.appendChild(el("line", { x1: 0, y1: H - PAD, x2: W, y2: H - PAD, "class": "axis" }));
    svg.appendChild(el("text", { x: 2, y: 12, "class": "tick" }, round(top)));
    lines.forEach(function (values, n) {
      var points = [];
      values.forEach(function (v, i) {
        if (v === null) { return; }
        var x = values.length < 2 ? W / 2 : PAD + i * (W - 2 * PAD) / (values.length - 1);
        var y = H - PAD - v / top * (H - 2 * PAD - 12);
        points.push(x.toFixed(1) + "," + y.toFixed(1));
      });
      svg.appendChild(el("polyline", { points: points.join(" "), "class": n === 0 ? "series" : "series second" }));
    });
    fig.appendChild(cap);
    fig.appendChild(svg);
    return fig;
  }

  function draw(samples) {
    while (root.firstChild) { root.removeChild(root.firstChild); }
    series.forEach(function (s) { root.appendChild(chart(s, samples)); });
    var last = samples[samples.length - 1];
    status.textContent = last ? "sample " + last.sample + " at " + last.time + " · " + last.database + "/" + last.container : "no sample";
  }

  function poll() {
    fetch("/live.json", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (!r.ok) { return r.text().then(function (t) { throw new Error(t); }); }
        return r.json();
      })
      .then(function (body) { draw(body.samples || []); })
      .catch(function (e) { status.textContent = "cannot sample: " + e.message; })
      .then(function () { setTimeout(poll, 2000); });
  }
  poll();
}());
