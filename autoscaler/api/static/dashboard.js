// llm-autoscaler dashboard: polls /v1/dashboard/state every second and draws with uPlot.
// Missing values arrive as null and are drawn as gaps (never as zeros).
"use strict";
(function () {
  const FEED = "/v1/dashboard/state";
  const POLL_MS = 1000;
  const views = new Map(); // target id -> {section, charts, tiles, table}

  const CHARTS = [
    { key: "load", title: "Load (requests/s) and forecast", series: [
      ["arrival_rate_per_s", "arrivals/s", "#4fa3ff"],
      ["forecast_arrival_rate_per_s", "forecast", "#b38cff", [6, 4]]] },
    { key: "queue", title: "Queue: waiting and running requests", series: [
      ["waiting", "waiting", "#ff9f43"], ["running", "running", "#3ecf8e"]] },
    { key: "kv", title: "KV-cache usage (%)", series: [
      ["kv_cache_usage", "mean", "#4fa3ff"], ["kv_cache_usage_max", "max", "#ff5d5d"]],
      scale: 100 },
    { key: "ttft", title: "TTFT quantiles (s) vs SLO", series: [
      ["ttft_p50_s", "p50", "#3ecf8e"], ["ttft_p95_s", "p95", "#ff9f43"],
      ["ttft_p99_s", "p99", "#ff5d5d"], ["__slo", "SLO", "#e6e6e6", [2, 4]]] },
    { key: "replicas", title: "Replicas: current, ready, desired, forecast", series: [
      ["current_replicas", "current", "#4fa3ff"], ["ready_replicas", "ready", "#3ecf8e"],
      ["desired_replicas", "desired", "#ff9f43"],
      ["forecast_replicas", "forecast", "#b38cff", [6, 4]]], stepped: true },
  ];

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function fmt(v, digits) {
    if (v === null || v === undefined) return "–";
    return typeof v === "number" ? v.toFixed(digits === undefined ? 0 : digits) : String(v);
  }

  function makeChart(spec, container) {
    const width = Math.max(360, container.clientWidth - 8 || 420);
    const opts = {
      width: width, height: 200,
      scales: { x: { time: false } },
      axes: [
        { stroke: "#8a96a3", grid: { stroke: "#26313c" }, label: "seconds (0 = now)" },
        { stroke: "#8a96a3", grid: { stroke: "#26313c" } },
      ],
      series: [{ label: "t" }].concat(spec.series.map(([, label, color, dash]) => {
        const s = { label: label, stroke: color, width: 2, spanGaps: false };
        if (dash) s.dash = dash;
        if (spec.stepped) s.paths = uPlot.paths.stepped({ align: 1 });
        return s;
      })),
    };
    const empty = [[]].concat(spec.series.map(() => []));
    return new uPlot(opts, empty, container);
  }

  function ensureView(target) {
    let v = views.get(target.id);
    if (v) return v;
    document.getElementById("empty")?.remove();
    const section = el("section", { class: "target", "data-target": target.id });
    section.appendChild(el("h2", {}, target.id));
    const tiles = el("div", { class: "tiles" });
    section.appendChild(tiles);
    const chartsDiv = el("div", { class: "charts" });
    section.appendChild(chartsDiv);
    document.getElementById("targets").appendChild(section);
    const charts = {};
    for (const spec of CHARTS) {
      const box = el("div", { class: "chart", "data-chart": spec.key, "data-points": "0" });
      box.appendChild(el("h3", {}, spec.title));
      chartsDiv.appendChild(box);
      charts[spec.key] = { spec: spec, box: box, plot: makeChart(spec, box) };
    }
    section.appendChild(el("h3", {}, "Decisions (newest first)"));
    const table = el("table", { class: "decisions" });
    table.innerHTML = "<thead><tr><th>t</th><th>replicas</th><th>reason</th>" +
      "<th>message</th><th>numbers</th></tr></thead><tbody></tbody>";
    section.appendChild(table);
    v = { section: section, tiles: tiles, charts: charts, table: table };
    views.set(target.id, v);
    return v;
  }

  function renderTiles(v, t) {
    const last = t.decisions.length ? t.decisions[0] : null;
    const p95 = t.latest.ttft_p95_s;
    const tiles = [
      ["current", fmt(t.current_replicas)], ["ready", fmt(t.ready_replicas)],
      ["desired", fmt(t.desired_replicas)], ["forecast", fmt(t.forecast_replicas)],
      ["warm pool", fmt(t.warm_pool_replicas)],
      ["waiting", fmt(t.latest.waiting)], ["running", fmt(t.latest.running)],
      ["KV usage", t.latest.kv_cache_usage === null ? "–" : fmt(100 * t.latest.kv_cache_usage, 1) + "%"],
      ["TTFT p95", p95 === null ? "–" : fmt(p95, 3) + " s", p95 !== null && p95 > t.slo_ttft_s],
      ["SLO", fmt(t.slo_ttft_s, 2) + " s"],
      ["last reason", last ? last.reason : "–"],
    ];
    v.tiles.replaceChildren(...tiles.map(([label, value, bad]) => {
      const tile = el("div", { class: "tile", "data-tile": label });
      tile.appendChild(el("div", { class: "label" }, label));
      tile.appendChild(el("div", { class: "value" + (bad ? " bad" : "") }, value));
      return tile;
    }));
  }

  function renderCharts(v, t) {
    const ts = t.series.t;
    const now = ts.length ? ts[ts.length - 1] : 0;
    const x = ts.map((s) => s - now);
    for (const { spec, box, plot } of Object.values(v.charts)) {
      const ys = spec.series.map(([key]) => {
        if (key === "__slo") return ts.map(() => t.slo_ttft_s);
        const raw = t.series[key] || ts.map(() => null);
        return spec.scale ? raw.map((y) => (y === null ? null : y * spec.scale)) : raw;
      });
      plot.setData([x].concat(ys));
      const points = ys.reduce((n, y) => n + y.filter((p) => p !== null).length, 0);
      box.setAttribute("data-points", String(points));
    }
  }

  function renderDecisions(v, t) {
    const body = v.table.tBodies[0];
    body.replaceChildren(...t.decisions.map((d) => {
      const tr = el("tr", { class: "decision", "data-reason": d.reason });
      tr.appendChild(el("td", { class: "num" }, fmt(d.t, 1)));
      tr.appendChild(el("td", { class: "num" }, d.current_replicas + " → " + d.desired_replicas));
      const reason = el("td", { class: "reason " + d.reason }, d.reason);
      if (d.limits && d.limits.length) reason.textContent += " (" + d.limits.join(", ") + ")";
      tr.appendChild(reason);
      tr.appendChild(el("td", {}, d.message));
      const nums = Object.entries(d.numbers || {}).map(([k, n]) => k + "=" + fmt(n, 3)).join(" ");
      tr.appendChild(el("td", { class: "num" }, nums));
      return tr;
    }));
  }

  async function poll() {
    try {
      const resp = await fetch(FEED, { cache: "no-store" });
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      const state = await resp.json();
      const pill = document.getElementById("controller");
      pill.textContent = (state.ready ? "ready" : "starting") + (state.leader ? " · leader" : "") +
        " · tick " + state.ticks;
      for (const target of state.targets) {
        const v = ensureView(target);
        renderTiles(v, target);
        renderCharts(v, target);
        renderDecisions(v, target);
      }
      document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
      document.body.setAttribute("data-state", "live");
    } catch (err) {
      document.getElementById("controller").textContent = "feed error: " + err.message;
      document.body.setAttribute("data-state", "error");
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  poll();
})();
