// The pipelines page: every pipeline with its state, throughput, watermark and lag,
// timers, windows, late and dead-letter counts; refreshed every two seconds.

import { get } from "./api.js";
import {
  appendSamples,
  el,
  fmtCount,
  fmtDuration,
  fmtRate,
  fmtTime,
  stateBadge,
  sum,
} from "./util.js";

const REFRESH_MS = 2000;

function sparkline(samples) {
  const values = samples.map((s) => s.records_in_per_s).filter((v) => v !== null).slice(-60);
  const node = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  node.setAttribute("viewBox", "0 0 60 16");
  node.setAttribute("class", "spark");
  if (values.length > 1) {
    const hi = Math.max(...values, 1);
    const points = values.map((v, i) => `${i * (60 / (values.length - 1))},${16 - (v / hi) * 15}`);
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", points.join(" "));
    node.append(line);
  }
  return node;
}

export async function renderPipelines(root) {
  const series = new Map();
  let since = null;
  const body = el("tbody");
  const empty = el("p", { class: "empty", hidden: true }, "No pipelines yet. ", el("a", { href: "#/new" }, "Create one"), ".");
  const updated = el("span", { class: "updated" });
  root.replaceChildren(
    el("h1", {}, "Pipelines ", updated),
    el(
      "table",
      { class: "grid", id: "pipelines" },
      el(
        "thead",
        {},
        el(
          "tr",
          {},
          ["name", "state", "in", "out", "", "watermark", "lag", "timers (event / proc.)",
           "windows", "late", "dead letters"].map((h) => el("th", {}, h)),
        ),
      ),
      body,
    ),
    empty,
  );

  async function refresh() {
    const query = since === null ? "" : `?since_ms=${since}`;
    const [pipelines, history] = await Promise.all([get("/pipelines"), get(`/history${query}`)]);
    for (const [name, samples] of Object.entries(history.pipelines)) {
      if (!series.has(name)) series.set(name, []);
      appendSamples(series.get(name), samples);
      if (samples.length) since = Math.max(since ?? 0, samples[samples.length - 1].at_ms);
    }
    empty.hidden = pipelines.length > 0;
    body.replaceChildren(
      ...pipelines.map((p) => {
        const samples = series.get(p.name) || [];
        const last = samples[samples.length - 1] || {};
        const parts = p.status.partitions || [];
        const watermark = p.status.watermark;
        const lag = last.watermark_lag_ms ?? null;
        return el(
          "tr",
          { dataset: { pipeline: p.name } },
          el("td", {}, el("a", { href: `#/pipelines/${encodeURIComponent(p.name)}` }, p.name)),
          el("td", { dataset: { field: "state" } }, stateBadge(p.paused && p.status.state !== "failed" ? "paused" : p.status.state)),
          el("td", { class: "num", dataset: { field: "in" } }, fmtRate(last.records_in_per_s)),
          el("td", { class: "num", dataset: { field: "out" } }, fmtRate(last.records_out_per_s)),
          el("td", {}, sparkline(samples)),
          el("td", { class: "num", dataset: { field: "watermark" } }, fmtTime(watermark)),
          el("td", { class: "num", dataset: { field: "lag" } }, fmtDuration(lag)),
          el(
            "td",
            { class: "num", dataset: { field: "timers" } },
            `${fmtCount(sum(parts, (x) => x.event_timers))} / ${fmtCount(sum(parts, (x) => x.processing_timers))}`,
          ),
          el("td", { class: "num", dataset: { field: "windows" } }, fmtCount(sum(parts, (x) => x.windows_open))),
          el("td", { class: "num", dataset: { field: "late" } }, fmtCount(last.late_records)),
          el("td", { class: "num", dataset: { field: "dead_letters" } }, fmtCount(last.dead_letters)),
        );
      }),
    );
    updated.textContent = `updated ${new Date().toLocaleTimeString()}`;
  }

  let stopped = false;
  let timer = null;
  const loop = async () => {
    try {
      await refresh();
    } catch (error) {
      updated.textContent = `refresh failed: ${error.message}`;
    }
    if (!stopped) timer = setTimeout(loop, REFRESH_MS);
  };
  await loop();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
