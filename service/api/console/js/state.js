// Pull queries on a pipeline's page (docs/pull-queries.md): a "look up a key" box, and
// for a table pipeline (a running aggregate or a Top-N) its current rows, the first
// ROWS_SHOWN by key, refreshed with the page.

import { ApiError, get } from "./api.js";
import { el, fmtTime } from "./util.js";

const ROWS_SHOWN = 100;
const TABLE_KINDS = new Set(["aggregate", "top_n"]);

function asOfText(asOf) {
  return `partition ${asOf.partition} at offset ${asOf.offset ?? "–"}, watermark ${fmtTime(asOf.watermark)}`;
}

function failure(error) {
  if (error instanceof ApiError && error.status === 503) return `not readable now (${error.message}); try again`;
  return error.message;
}

// The "look up a key" box: the key's state as JSON, with what it is as of.
export function lookupBox(path) {
  const input = el("input", { type: "text", id: "lookup-key", placeholder: "a key", "aria-label": "key" });
  const info = el("p", { class: "status", id: "lookup-info", role: "status" });
  const result = el("pre", { class: "spec", id: "lookup-result", hidden: true });
  const form = el(
    "form",
    {
      class: "toolbar",
      id: "lookup",
      onsubmit: async (event) => {
        event.preventDefault();
        const key = input.value;
        info.textContent = "…";
        result.hidden = true;
        try {
          const answer = await get(`${path}/state/${encodeURIComponent(key)}`);
          info.textContent = `${answer.found ? "found" : "not found"} · ${asOfText(answer.as_of)} · answered by ${answer.member}`;
          info.dataset.found = String(answer.found);
          result.textContent = JSON.stringify(answer.state, null, 2);
          result.hidden = !answer.found;
        } catch (error) {
          info.dataset.found = "";
          info.textContent = failure(error);
        }
      },
    },
    input,
    el("button", { type: "submit", id: "lookup-go" }, "Look up"),
  );
  return [el("h2", {}, "Look up a key"), form, info, result];
}

// A table pipeline's rows: the scan's first page, one line per key (a Top-N's per rank).
export function tableRows(spec, path) {
  const kind = spec?.operator?.type;
  if (!TABLE_KINDS.has(kind)) return null;
  const info = el("p", { class: "muted", id: "rows-info" }, "loading…");
  const table = el("table", { class: "grid", id: "table-rows" });
  async function refresh() {
    try {
      const page = await get(`${path}/state?limit=${ROWS_SHOWN}`);
      table.replaceChildren(...(kind === "top_n" ? rankRows(page.rows) : aggregateRows(page.rows)));
      const more = page.next !== null ? ` (the first ${ROWS_SHOWN} by key)` : "";
      info.textContent = `${page.rows.length} rows${more}, as of ${page.as_of.map(asOfText).join("; ")}`;
    } catch (error) {
      info.textContent = failure(error);
    }
  }
  return { elements: [el("h2", {}, "Rows"), info, table], refresh };
}

function aggregateRows(rows) {
  const names = [...new Set(rows.flatMap((r) => Object.keys(r.state.result || {})))];
  const head = el("tr", {}, el("th", {}, "key"), ...names.map((n) => el("th", {}, n)));
  return [
    head,
    ...rows.map((r) =>
      el(
        "tr",
        { dataset: { key: r.key } },
        el("td", {}, r.key),
        ...names.map((n) => el("td", {}, JSON.stringify(r.state.result?.[n] ?? null))),
      ),
    ),
  ];
}

function rankRows(rows) {
  const head = el("tr", {}, el("th", {}, "key"), el("th", {}, "rank"), el("th", {}, "row"));
  return [
    head,
    ...rows.flatMap((r) =>
      r.state.ranks.map((rank) =>
        el(
          "tr",
          { dataset: { key: r.key } },
          el("td", {}, r.key),
          el("td", {}, String(rank.rank)),
          el("td", {}, el("code", {}, JSON.stringify(rank.row))),
        ),
      ),
    ),
  ];
}
