// One pipeline: its numbers, a join's two inputs, live charts, a key's state (and a
// table pipeline's rows), partitions grouped by stage, the live tail of its result, late and dead-letter topics, its SQL script (the
// compiled spec a click away) or its spec, and pause / resume / edit / delete.

import { ApiError, confirmDialog, get, openStream, send } from "./api.js";
import { lineChart } from "./chart.js";
import { inputsTable, joinInputs } from "./inputs.js";
import { lookupBox, tableRows } from "./state.js";
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
const TAIL_KEEP = 200;
const KINDS = { result: "result", late: "late", dead_letter: "dead letter" };

function partitionRow(p) {
  const flags = [
    p.idle && "idle",
    p.aligned_paused && "alignment-paused",
    p.finished && "finished",
  ].filter(Boolean);
  return el(
    "tr",
    { dataset: { partition: `${p.topic}/${p.partition}` } },
    el("td", {}, `${p.topic}/${p.partition}`),
    el("td", { class: "num" }, fmtCount(p.offset)),
    el("td", { class: "num" }, fmtCount(p.end_offset)),
    el("td", { class: "num", dataset: { field: "lag" } }, fmtCount(p.lag)),
    el("td", { class: "num", dataset: { field: "watermark" } }, fmtTime(p.watermark)),
    el("td", { class: "num" }, fmtTime(p.delivered_watermark)),
    el("td", {}, flags.map((f) => el("span", { class: `flag flag-${f}` }, f))),
    el("td", { class: "num" }, `${fmtCount(p.event_timers)} / ${fmtCount(p.processing_timers)}`),
    el("td", { class: "num" }, fmtCount(p.windows_open)),
    el("td", { class: "num" }, fmtCount(p.keys)),
    el("td", { class: "num" }, fmtCount(p.records_in)),
    el("td", { class: "num" }, p.last_checkpoint_ms ? fmtTime(p.last_checkpoint_ms) : "–"),
    el(
      "td",
      { dataset: { field: "owner" }, class: p.owner && p.owner.lost ? "lost" : "" },
      p.owner ? `${p.owner.member}${p.owner.lost ? " (lost)" : ""}` : "–",
    ),
  );
}

// Partitions grouped by the stage they belong to (a keyed shuffle has two).
function partitionTables(status) {
  const stages = new Map((status.stages || []).map((s) => [s.name, s]));
  const groups = new Map();
  for (const p of status.partitions || []) {
    const stage = p.stage || "keyed";
    if (!groups.has(stage)) groups.set(stage, []);
    groups.get(stage).push(p);
  }
  for (const name of stages.keys()) if (!groups.has(name)) groups.set(name, []);
  if (groups.size === 0) return [el("p", { class: "empty" }, "No partitions assigned yet.")];
  const head = ["partition", "offset", "end", "lag", "watermark", "delivered", "", "timers (event / proc.)",
    "windows", "keys", "records in", "last checkpoint", "owner"];
  return [...groups.entries()].map(([name, parts]) => {
    const stage = stages.get(name);
    return el(
      "section",
      { class: "stage", dataset: { stage: name } },
      el(
        "h3",
        {},
        `stage ${name} `,
        stage && stateBadge(stage.state),
        stage && el("span", { class: "muted" }, ` watermark ${fmtTime(stage.watermark)}`),
      ),
      el(
        "table",
        { class: "grid" },
        el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
        el("tbody", {}, parts.map(partitionRow)),
      ),
    );
  });
}

// Bytes that are not readable text come as hex (the tail says which): shown with 0x and
// marked, so they are never taken for text.
function bytesShown(text, format, tag = "code", attrs = {}) {
  if (format !== "hex") return el(tag, attrs, text);
  const marked = { ...attrs, class: [attrs.class, "hex"].filter(Boolean).join(" ") };
  return el(tag, { ...marked, title: "not readable text: the bytes in hex" }, `0x${text}`);
}

function tailHeader(header) {
  return el(
    "li",
    { dataset: { header: header.name, format: header.format } },
    el("code", { class: "header-name" }, header.name),
    " ",
    bytesShown(header.value, header.format, "code", { class: "header-value" }),
  );
}

function tailRecord(record) {
  return el(
    "article",
    { class: `record kind-${record.kind}`, dataset: { kind: record.kind, offset: String(record.offset) } },
    el(
      "header",
      {},
      el("span", { class: `badge kind-${record.kind}` }, KINDS[record.kind] || record.kind),
      el("code", {}, `${record.topic}/${record.partition}@${record.offset}`),
      el("span", {}, fmtTime(record.timestamp)),
      el(
        "span",
        {},
        "key ",
        record.key === null
          ? el("code", { class: "key" }, "null")
          : bytesShown(record.key, record.key_format, "code", { class: "key" }),
      ),
    ),
    record.headers.length ? el("ul", { class: "headers" }, record.headers.map(tailHeader)) : null,
    record.value_format === "json"
      ? el("pre", { class: "value" }, JSON.stringify(record.value, null, 2))
      : bytesShown(record.value, record.value_format, "pre", { class: "value" }),
  );
}

export async function renderPipeline(root, { name }) {
  const path = `/pipelines/${encodeURIComponent(name)}`;
  const samples = [];
  let since = null;
  let described = await get(path);

  const title = el("h1", {}, name, " ", el("span", { id: "state" }));
  const message = el("p", { class: "status", id: "pipeline-message", role: "status" });
  const pause = el("button", { type: "button", id: "pause", onclick: () => act("pause") }, "Pause");
  const resume = el("button", { type: "button", id: "resume", onclick: () => act("resume") }, "Resume");
  const remove = el("button", { type: "button", id: "delete", class: "danger", onclick: () => onDelete() }, "Delete");
  const numbers = el("dl", { class: "numbers", id: "numbers" });
  const charts = el("div", { class: "charts" });
  const partitions = el("div", { id: "partitions" });
  const tailList = el("div", { class: "tail", id: "tail" });
  const tailInfo = el("p", { class: "muted", id: "tail-info" }, "connecting…");
  const spec = el("pre", { class: "spec", id: "spec" });
  const inputs = el("div", { id: "join-inputs" });
  const inputsHeading = el("h2", { hidden: true }, "Inputs");
  // A SQL pipeline shows its script as written, and the spec it compiled to on demand.
  const script = described.sql
    ? [
        el("h2", {}, "SQL"),
        el("pre", { class: "sql", id: "sql-script" }, described.sql),
        el("details", { id: "compiled-view" }, el("summary", {}, "Compiled spec"), spec),
      ]
    : [el("h2", {}, "Spec"), spec];
  const rows = tableRows(described.spec, path);
  let filter = "all";
  const filters = el(
    "div",
    { class: "filters" },
    ["all", "result", "late", "dead_letter"].map((kind) =>
      el(
        "button",
        {
          type: "button",
          class: kind === "all" ? "on" : "",
          dataset: { kind },
          onclick: (event) => {
            filter = kind;
            for (const b of filters.children) b.classList.toggle("on", b === event.currentTarget);
            tailList.dataset.filter = kind;
          },
        },
        kind === "all" ? "all" : KINDS[kind],
      ),
    ),
  );
  tailList.dataset.filter = filter;

  root.replaceChildren(
    el("p", {}, el("a", { href: "#/" }, "← all pipelines")),
    title,
    el(
      "div",
      { class: "toolbar" },
      pause,
      resume,
      el("a", { class: "button", href: `#/pipelines/${encodeURIComponent(name)}/edit`, id: "edit" }, "Edit"),
      remove,
    ),
    message,
    numbers,
    inputsHeading,
    inputs,
    charts,
    ...lookupBox(path),
    ...(rows ? rows.elements : []),
    el("h2", {}, "Partitions"),
    partitions,
    el("h2", {}, "Live tail ", filters),
    tailInfo,
    tailList,
    ...script,
  );

  const throughput = lineChart(charts, {
    id: "throughput",
    title: "Records/s",
    format: (v) => fmtCount(v),
    series: [
      { key: "in", label: "in", color: "#2563eb", value: (s) => s.records_in_per_s },
      { key: "out", label: "out", color: "#16a34a", value: (s) => s.records_out_per_s },
    ],
  });
  const watermarkLag = lineChart(charts, {
    id: "watermark_lag",
    title: "Watermark lag",
    format: (v) => fmtDuration(v),
    series: [{ key: "lag", label: "lag", color: "#9333ea", value: (s) => s.watermark_lag_ms }],
  });
  const timers = lineChart(charts, {
    id: "timers",
    title: "Timers queued",
    format: (v) => fmtCount(v),
    series: [
      { key: "event", label: "event", color: "#ea580c", value: (s) => s.event_timers },
      { key: "processing", label: "processing", color: "#0891b2", value: (s) => s.processing_timers },
    ],
  });

  function draw() {
    const status = described.status;
    const state = described.paused && status.state !== "failed" ? "paused" : status.state;
    title.querySelector("#state").replaceChildren(stateBadge(state));
    pause.disabled = described.paused;
    resume.disabled = !described.paused;
    const parts = status.partitions || [];
    const last = samples[samples.length - 1] || {};
    const facts = [
      ["state", state, "state"],
      ["watermark", fmtTime(status.watermark), "watermark"],
      ["watermark lag", fmtDuration(last.watermark_lag_ms ?? null), "lag"],
      ["records/s in", fmtRate(last.records_in_per_s), "in"],
      ["records/s out", fmtRate(last.records_out_per_s), "out"],
      ["timers (event / proc.)", `${fmtCount(sum(parts, (p) => p.event_timers))} / ${fmtCount(sum(parts, (p) => p.processing_timers))}`, "timers"],
      ["windows open", fmtCount(sum(parts, (p) => p.windows_open)), "windows"],
      ["late records", fmtCount(last.late_records), "late"],
      ["dead letters", fmtCount(last.dead_letters), "dead_letters"],
      ["consumer lag", fmtCount(sum(parts, (p) => p.lag)), "consumer_lag"],
    ];
    if (status.reason) facts.push(["reason", status.reason, "reason"]);
    numbers.replaceChildren(
      ...facts.map(([label, value, field]) =>
        el("div", { dataset: { field } }, el("dt", {}, label), el("dd", {}, value)),
      ),
    );
    if (samples.length) watermarkLag.element.dataset.lastWatermark = String(samples[samples.length - 1].watermark ?? "");
    throughput.update(samples);
    watermarkLag.update(samples);
    timers.update(samples);
    partitions.replaceChildren(...partitionTables(status));
    const join = joinInputs(described.spec, status);
    inputsHeading.hidden = join === null;
    inputs.replaceChildren(...(join ? [inputsTable(join)] : []));
    spec.textContent = JSON.stringify(described.spec, null, 2);
    if (described.sql) script[1].textContent = described.sql;
  }

  async function refresh() {
    const query = since === null ? "" : `?since_ms=${since}`;
    // The whole pipeline (every replica's partitions, each with its owner), not only
    // this replica's part that the pipeline's own resource carries.
    const [fresh, whole, history] = await Promise.all([
      get(path),
      get(`${path}/status`),
      get(`${path}/history${query}`),
      rows ? rows.refresh() : null,
    ]);
    described = { ...fresh, status: whole };
    appendSamples(samples, history.samples);
    if (history.samples.length) since = history.samples[history.samples.length - 1].at_ms;
    draw();
  }

  async function act(what) {
    message.textContent = "";
    try {
      described = await send("POST", `${path}/${what}`);
      draw();
    } catch (error) {
      message.textContent = `${what} failed: ${error.message}`;
    }
  }

  async function onDelete() {
    if (!(await confirmDialog(`Delete pipeline ${name}? Its state is dropped.`))) return;
    try {
      await send("DELETE", path);
      location.hash = "#/";
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) location.hash = "#/";
      else message.textContent = `delete failed: ${error.message}`;
    }
  }

  // The live tail: newest first, at most TAIL_KEEP records.
  let shown = 0;
  const source = openStream(`${path}/tail`, {
    topics(topics) {
      tailInfo.textContent = `live: ${Object.entries(topics).map(([k, t]) => `${KINDS[k]} ${t}`).join(" · ")} (newest first, last ${TAIL_KEEP})`;
      tailList.replaceChildren();
      shown = 0;
    },
    records({ records, skipped }) {
      for (const record of records) tailList.prepend(tailRecord(record));
      shown += records.length;
      while (tailList.childElementCount > TAIL_KEEP) tailList.lastElementChild.remove();
      if (skipped) tailList.prepend(el("p", { class: "skipped" }, `${fmtCount(skipped)} older records of that fetch not shown`));
    },
    error(refused) {
      tailInfo.textContent = refused ? "tail: no API token given" : "tail disconnected; reconnecting…";
    },
  });

  let stopped = false;
  let timer = null;
  draw();
  const loop = async () => {
    try {
      await refresh();
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) {
        message.textContent = "This pipeline no longer exists.";
        return;
      }
      message.textContent = `refresh failed: ${error.message}`;
    }
    if (!stopped) timer = setTimeout(loop, REFRESH_MS);
  };
  await loop();
  return () => {
    stopped = true;
    clearTimeout(timer);
    source.close();
  };
}
