// llm-autoscaler dashboard: polls /v1/dashboard/state every second and draws with uPlot.
// Missing values arrive as null and are drawn as gaps (never as zeros).
"use strict";
(function () {
  const FEED = "/v1/dashboard/state";
  const POLL_MS = 1000;
  const views = new Map(); // target id -> {section, charts, tiles, table}

  const CHARTS = [
    { key: "load", title: "Requests reaching their first token per second (TTFT-histogram " +
      "count rate: not arrivals, it spikes when a backlog drains) and its forecast", series: [
      ["arrival_rate_per_s", "first tokens/s", "#4fa3ff"],
      ["forecast_arrival_rate_per_s", "forecast", "#b38cff", [6, 4]]] },
    { key: "queue", title: "Queue: waiting and running requests", series: [
      ["waiting", "waiting", "#ff9f43"], ["running", "running", "#3ecf8e"]] },
    { key: "kv", title: "KV-cache usage (%)", series: [
      ["kv_cache_usage", "mean", "#4fa3ff"], ["kv_cache_usage_max", "max", "#ff5d5d"]],
      scale: 100 },
    { key: "ttft", title: "TTFT quantiles (s) vs SLO", series: [
      ["ttft_p50_s", "p50", "#3ecf8e"], ["ttft_p95_s", "p95", "#ff9f43"],
      ["ttft_p99_s", "p99", "#ff5d5d"], ["__slo", "SLO", "#e6e6e6", [2, 4]]] },
    { key: "replicas", title: "Replicas: current, ready, desired, forecast (capped at max)",
      series: [
      ["current_replicas", "current", "#4fa3ff"], ["ready_replicas", "ready", "#3ecf8e"],
      ["desired_replicas", "desired", "#ff9f43"],
      ["forecast_replicas", "forecast ≤ max", "#b38cff", [6, 4]]], stepped: true },
  ];
  // Side by side (the demo's two fleets on the same load): one line per fleet.
  const FLEET_COLORS = { ours: "#3ecf8e", keda: "#ff5d5d" };
  const COMPARE = [
    { key: "ttft_p95_s", title: "TTFT p95 as clients see it (s, last 30 s of answers)", slo: true },
    { key: "gpus", title: "GPUs held (pause pods and Pending pods included: what is billed)" },
    { key: "ready", title: "Ready replicas (serving)", stepped: true },
    { key: "waiting", title: "Waiting requests (queued in the engines)" },
  ];
  let compareView = null;

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

  function makeChart(spec, container, xLabel) {
    const width = Math.max(360, container.clientWidth - 8 || 420);
    const opts = {
      width: width, height: 200,
      scales: { x: { time: false } },
      axes: [
        { stroke: "#8a96a3", grid: { stroke: "#26313c" }, label: xLabel || "seconds (0 = now)" },
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
    const policy = el("div", { class: "policy" });
    section.appendChild(policy);
    section.appendChild(el("h3", {}, "Decisions (newest first; identical consecutive ones collapsed)"));
    const table = el("table", { class: "decisions" });
    table.innerHTML = "<thead><tr><th>t</th><th>replicas</th><th>reason</th>" +
      "<th>message</th><th>numbers</th></tr></thead><tbody></tbody>";
    section.appendChild(table);
    v = { section: section, tiles: tiles, charts: charts, table: table, policy: policy,
          policyText: "" };
    views.set(target.id, v);
    return v;
  }

  function renderTiles(v, t) {
    const last = t.decisions.length ? t.decisions[0] : null;
    const p95 = t.latest.ttft_p95_s;
    const tiles = [
      ["current", fmt(t.current_replicas)], ["ready", fmt(t.ready_replicas)],
      ["desired", fmt(t.desired_replicas)],
      ["forecast", t.forecast_replicas !== null && t.forecast_replicas > t.policy.max_replicas
        ? fmt(t.forecast_replicas_capped) + " (asks " + fmt(t.forecast_replicas) + ")"
        : fmt(t.forecast_replicas)],
      ["min–max", fmt(t.policy.min_replicas) + "–" + fmt(t.policy.max_replicas)],
      ["mode", t.mode],
      ["warm pool", fmt(t.warm_pool_replicas)],
      ["waiting", fmt(t.latest.waiting)], ["running", fmt(t.latest.running)],
      ["KV usage", t.latest.kv_cache_usage === null ? "–" : fmt(100 * t.latest.kv_cache_usage, 1) + "%"],
      ["TTFT p95", p95 === null ? "–" : fmt(p95, 3) + " s", p95 !== null && p95 > t.slo_ttft_s],
      ["SLO", fmt(t.slo_ttft_s, 2) + " s"],
      // No replica ready and no data: pods are cold-starting, not failing (the API keeps
      // the machine-readable reason).
      ["last reason", !last ? "–" : (last.reason === "hold-missing-data" && t.ready_replicas === 0
        && t.current_replicas > 0 ? "waiting for the first replica (cold start)" : last.reason)],
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

  function span(d) {
    if (d.count <= 1) return fmt(d.t, 1);
    return fmt(d.first_t, 1) + "–" + fmt(d.last_t, 1) + " (×" + d.count + ")";
  }

  function numbersCell(d) {
    const entries = Object.entries(d.numbers || {});
    const td = el("td", { class: "numbers" });
    if (!entries.length) return td;
    const details = el("details", {});
    details.appendChild(el("summary", {}, entries.length + " numbers"));
    const list = el("dl", {});
    for (const [k, n] of entries) {
      list.appendChild(el("dt", {}, k));
      list.appendChild(el("dd", {}, fmt(n, 3)));
    }
    details.appendChild(list);
    td.appendChild(details);
    return td;
  }

  function renderDecisions(v, t) {
    const body = v.table.tBodies[0];
    const open = new Set([...body.querySelectorAll("details[open]")].map(
      (e) => e.closest("tr").getAttribute("data-key")));
    body.replaceChildren(...t.decisions.map((d) => {
      const key = d.first_t + ":" + d.reason;
      const tr = el("tr", { class: "decision", "data-reason": d.reason, "data-count": String(d.count),
                            "data-key": key });
      tr.appendChild(el("td", { class: "num" }, span(d)));
      tr.appendChild(el("td", { class: "num" }, d.current_replicas + " → " + d.desired_replicas));
      const reason = el("td", { class: "reason " + d.reason }, d.reason);
      if (d.limits && d.limits.length) reason.textContent += " (" + d.limits.join(", ") + ")";
      tr.appendChild(reason);
      tr.appendChild(el("td", { class: "message" }, d.message));
      const nums = numbersCell(d);
      if (open.has(key)) nums.querySelector("details")?.setAttribute("open", "");
      tr.appendChild(nums);
      return tr;
    }));
  }

  function renderPolicy(v, t) {
    const text = JSON.stringify(t.policy.document, null, 1);
    if (text === v.policyText) return;
    v.policyText = text;
    const origin = window.location.origin;
    const curl = "curl -X PATCH -H 'Authorization: Bearer $TOKEN' " +
      "-H 'Content-Type: application/merge-patch+json' -d '{\"maxReplicaCount\": 4}' " +
      origin + t.policy.patch_path;
    const keda = "curl -X PATCH -H 'Authorization: Bearer $TOKEN' " +
      "-H 'Content-Type: application/merge-patch+json' -d '{\"mode\": \"keda\"}' " +
      origin + t.policy.target_path;
    const details = el("details", { class: "policy-doc" });
    details.appendChild(el("summary", {}, "Policy (mode " + t.mode +
      "; fields left at their defaults are not shown) and how to change it"));
    details.appendChild(el("pre", {}, text));
    details.appendChild(el("p", { class: "muted" }, "Change it live (JSON merge patch; the " +
      "token is AUTOSCALER_API_TOKEN, or the one the demo printed):"));
    details.appendChild(el("pre", { class: "curl" }, curl));
    details.appendChild(el("p", { class: "muted" }, "Hand the target to KEDA (the controller " +
      "stops writing; KEDA reads the gRPC scaler or /v1/keda/…):"));
    details.appendChild(el("pre", { class: "curl" }, keda));
    const wasOpen = v.policy.querySelector("details")?.open;
    if (wasOpen) details.open = true;
    v.policy.replaceChildren(details);
  }

  function ensureCompare(cmp) {
    if (compareView) return compareView;
    const section = el("section", { class: "compare", id: "compare" });
    section.appendChild(el("h2", {}, "Same load, two fleets: " +
      cmp.fleets.map((f) => f.title + " (" + f.target + ")").join(" vs ")));
    const chartsDiv = el("div", { class: "charts" });
    section.appendChild(chartsDiv);
    const main = document.getElementById("targets");
    main.parentNode.insertBefore(section, main);
    const charts = {};
    for (const c of COMPARE) {
      const spec = { key: c.key, stepped: c.stepped, series: cmp.fleets.map((f) =>
        [f.key, f.title, FLEET_COLORS[f.key] || "#4fa3ff"]).concat(
          c.slo ? [["__slo", "SLO", "#e6e6e6", [2, 4]]] : []) };
      const box = el("div", { class: "chart", "data-compare": c.key, "data-points": "0" });
      box.appendChild(el("h3", {}, c.title));
      chartsDiv.appendChild(box);
      charts[c.key] = { spec: spec, box: box, plot: makeChart(spec, box, cmp.time) };
    }
    compareView = { section: section, charts: charts };
    return compareView;
  }

  function renderCompare(cmp, slo) {
    const v = ensureCompare(cmp);
    for (const c of COMPARE) {
      const { spec, box, plot } = v.charts[c.key];
      const ys = spec.series.map(([key]) =>
        key === "__slo" ? cmp.t.map(() => slo) : (cmp[key] ? cmp[key][c.key] : cmp.t.map(() => null)));
      plot.setData([cmp.t].concat(ys));
      const points = ys.reduce((n, y) => n + y.filter((p) => p !== null).length, 0);
      box.setAttribute("data-points", String(points));
    }
  }

  async function poll() {
    try {
      const resp = await fetch(FEED, { cache: "no-store" });
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      const state = await resp.json();
      const pill = document.getElementById("controller");
      pill.textContent = (state.ready ? "ready" : "starting") + (state.leader ? " · leader" : "") +
        " · tick " + state.ticks;
      document.getElementById("clock").textContent = state.clock || "";
      if (state.comparison) {
        const slo = state.targets.length ? state.targets[0].slo_ttft_s : null;
        renderCompare(state.comparison, slo);
      }
      for (const target of state.targets) {
        const v = ensureView(target);
        renderTiles(v, target);
        renderCharts(v, target);
        renderPolicy(v, target);
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
