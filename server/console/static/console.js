// syncd console: refreshes the overview's live figures. No framework, no
// inline script (the Content-Security-Policy forbids it); text goes in
// through textContent only, so nothing from the server becomes markup.
"use strict";

(function () {
  const live = document.getElementById("live");
  if (!live) {
    return;
  }
  const src = live.dataset.src;
  const every = 2000;
  const svgNS = "http://www.w3.org/2000/svg";
  const W = 600, H = 140, PAD = 28;

  const text = (id, value) => {
    const el = document.getElementById(id);
    if (el) {
      el.textContent = value;
    }
  };
  const fixed = (x) => (Math.round(x * 10) / 10).toString();
  const duration = (secs) => {
    const s = Math.floor(secs), d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
    return (d ? d + "d" : "") + (d || h ? h + "h" : "") + m + "m" + (s % 60) + "s";
  };

  // chart draws series (arrays of [time ms, value]) as polylines with a
  // baseline and the maximum as a label.
  const chart = (id, series, unit) => {
    const svg = document.getElementById(id);
    if (!svg) {
      return;
    }
    while (svg.firstChild) {
      svg.removeChild(svg.firstChild);
    }
    let t0 = Infinity, t1 = -Infinity, top = 0;
    for (const s of series) {
      for (const [t, v] of s.points) {
        t0 = Math.min(t0, t); t1 = Math.max(t1, t); top = Math.max(top, v);
      }
    }
    const axis = document.createElementNS(svgNS, "line");
    axis.setAttribute("class", "axis");
    axis.setAttribute("x1", PAD); axis.setAttribute("x2", W); axis.setAttribute("y1", H - PAD / 2); axis.setAttribute("y2", H - PAD / 2);
    svg.appendChild(axis);
    const label = document.createElementNS(svgNS, "text");
    label.setAttribute("x", 2); label.setAttribute("y", 12);
    label.textContent = "max " + fixed(top) + " " + unit;
    svg.appendChild(label);
    if (!(t1 > t0)) {
      const waiting = document.createElementNS(svgNS, "text");
      waiting.setAttribute("x", W / 2 - 60); waiting.setAttribute("y", H / 2);
      waiting.textContent = "collecting samples…";
      svg.appendChild(waiting);
      return;
    }
    const scaleTop = top > 0 ? top * 1.1 : 1;
    for (const s of series) {
      const line = document.createElementNS(svgNS, "polyline");
      line.setAttribute("class", "line " + (s.cls || ""));
      line.setAttribute("points", s.points.map(([t, v]) =>
        (PAD + (t - t0) / (t1 - t0) * (W - PAD)).toFixed(1) + "," + (H - PAD / 2 - v / scaleTop * (H - PAD)).toFixed(1)).join(" "));
      svg.appendChild(line);
    }
  };

  const show = (data) => {
    const st = data.status, f = data.figures, samples = data.samples || [];
    text("uptime", duration(st.uptime_seconds));
    text("connections", st.connections);
    text("maxlag", st.max_client_lag_entries);
    text("head", st.oplog_head);
    text("oldest", st.oplog_oldest);
    text("floor", st.oplog_floor);
    text("ledger", st.ledger_entries);
    const ready = document.getElementById("ready");
    if (ready) {
      ready.textContent = f.ready ? "ready" : "not ready: " + f.not_ready;
      ready.className = f.ready ? "ok" : "bad";
    }
    const alerts = document.getElementById("alerts");
    if (alerts) {
      while (alerts.firstChild) {
        alerts.removeChild(alerts.firstChild);
      }
      const items = f.alerts && f.alerts.length ? f.alerts : [null];
      for (const a of items) {
        const li = document.createElement("li");
        li.className = a ? "bad" : "ok";
        li.textContent = a ? a.name + ": " + a.detail : "none firing";
        alerts.appendChild(li);
      }
    }
    const last = samples.length ? samples[samples.length - 1] : null;
    text("applied-rate", last ? fixed(last.applied_per_s) + "/s" : "…");
    text("ack-latency", last ? (last.acks ? fixed(last.ack_mean_ms) + " / " + fixed(last.ack_p95_ms) + " ms" : "no pushes") : "…");
    const at = (s) => Date.parse(s.at);
    chart("chart-applied", [{points: samples.map((s) => [at(s), s.applied_per_s])}], "/s");
    chart("chart-ack", [
      {points: samples.filter((s) => s.acks).map((s) => [at(s), s.ack_mean_ms])},
      {points: samples.filter((s) => s.acks).map((s) => [at(s), s.ack_p95_ms]), cls: "p95"},
    ], "ms");
    text("live-status", samples.length + " samples; updated " + new Date().toLocaleTimeString());
    live.dataset.samples = samples.length;
  };

  const poll = () => {
    fetch(src, {credentials: "same-origin", cache: "no-store"})
      .then((r) => {
        if (r.status === 401) {
          window.location.assign("/console/login");
          return null;
        }
        if (!r.ok) {
          throw new Error("live figures: HTTP " + r.status);
        }
        return r.json();
      })
      .then((data) => { if (data) { show(data); } })
      .catch((e) => text("live-status", String(e)))
      .finally(() => window.setTimeout(poll, every));
  };
  poll();
}());
