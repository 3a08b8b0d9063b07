// A join's two inputs as its pipeline page shows them: each input's name, topics,
// watermark and rows held, and the join's watermark W, from the whole pipeline's status
// (GET /pipelines/{name}/status).
//
// Where the numbers are (docs/semantics.md, joins): the join runs over the shuffle, and
// each partition of its `shuffled` stage reports every input's watermark and rows held
// (`shuffle.inputs`); an input's watermark here is the minimum over those partitions,
// as W is over the inputs (the `shuffled` stage's watermark). A lookup join has no
// shuffle: its left input's watermark is the pipeline's, and its right input is a table
// read whole (`lookup_table`), which has no event time.

import { el, fmtCount, fmtTime } from "./util.js";

function minOf(values) {
  const known = values.filter((v) => v !== null && v !== undefined);
  return known.length ? Math.min(...known) : null;
}

// -> null for a pipeline without inputs, else {w, inputs: [{name, side, topics,
// watermark, rows, table}]}.
export function joinInputs(spec, status) {
  if (!spec.inputs || spec.operator?.type !== "join") return null;
  const { left, right, kind } = spec.operator;
  const parts = (status.partitions || []).filter((p) => p.shuffle?.inputs);
  const topicsOf = (name) => spec.inputs[name]?.source?.topics || [];
  if (kind === "lookup") {
    const table = status.lookup_table || null;
    return {
      w: status.watermark ?? null,
      inputs: [
        { name: left, side: "left", topics: topicsOf(left), watermark: status.watermark ?? null, rows: null, table: null },
        { name: right, side: "right", topics: topicsOf(right), watermark: null, rows: table?.rows ?? null, table: table || {} },
      ],
    };
  }
  const stage = (status.stages || []).find((s) => s.name === "shuffled");
  const inputs = [
    [left, "left"],
    [right, "right"],
  ].map(([name, side]) => {
    const mine = parts.map((p) => p.shuffle.inputs[name]).filter(Boolean);
    return {
      name,
      side,
      topics: topicsOf(name),
      watermark: minOf(mine.map((i) => i.watermark)),
      rows: mine.length ? mine.reduce((total, i) => total + (i.rows_held || 0), 0) : null,
      table: null,
    };
  });
  const w = stage ? stage.watermark : minOf(parts.map((p) => p.watermark));
  return { w: w ?? null, inputs };
}

export function inputsTable(join) {
  return el(
    "table",
    { class: "grid inputs", id: "inputs" },
    el(
      "thead",
      {},
      el("tr", {}, ["input", "side", "topics", "watermark", "rows held"].map((h) => el("th", {}, h))),
    ),
    el(
      "tbody",
      {},
      join.inputs.map((input) =>
        el(
          "tr",
          { dataset: { input: input.name, side: input.side } },
          el("td", {}, input.name),
          el("td", {}, input.side),
          el("td", { dataset: { field: "topics" } }, input.topics.join(", ")),
          el(
            "td",
            {
              class: "num",
              dataset: { field: "watermark", value: input.watermark === null ? "" : String(input.watermark) },
            },
            input.table
              ? `table (processing time)${input.table.loaded === false ? ", loading" : ""}`
              : fmtTime(input.watermark),
          ),
          el("td", { class: "num", dataset: { field: "rows" } }, fmtCount(input.rows)),
        ),
      ),
      el(
        "tr",
        { class: "join-w", dataset: { field: "join_watermark", value: join.w === null ? "" : String(join.w) } },
        el("td", { colspan: "3" }, "join watermark W (the inputs' minimum)"),
        el("td", { class: "num" }, fmtTime(join.w)),
        el("td", {}),
      ),
    ),
  );
}
