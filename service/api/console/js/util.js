// Small DOM and formatting helpers shared by the pages.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const MIN_TS = -(2 ** 63);
const MAX_TS = 2 ** 63 - 1;

// Event time as people read it: UTC, to the millisecond.
export function fmtTime(ms) {
  if (ms === null || ms === undefined || ms <= MIN_TS) return "–";
  if (ms >= MAX_TS) return "end of input";
  const iso = new Date(ms).toISOString();
  return `${iso.slice(0, 10)} ${iso.slice(11, 23)}`;
}

export function fmtDuration(ms) {
  if (ms === null || ms === undefined) return "–";
  const sign = ms < 0 ? "-" : "";
  const a = Math.abs(ms);
  if (a < 1000) return `${sign}${Math.round(a)} ms`;
  if (a < 60_000) return `${sign}${(a / 1000).toFixed(1)} s`;
  if (a < 3_600_000) return `${sign}${(a / 60_000).toFixed(1)} min`;
  if (a < 86_400_000) return `${sign}${(a / 3_600_000).toFixed(1)} h`;
  return `${sign}${(a / 86_400_000).toFixed(1)} d`;
}

export function fmtCount(n) {
  if (n === null || n === undefined) return "–";
  return Math.round(n).toLocaleString("en-US");
}

export function fmtRate(n) {
  if (n === null || n === undefined) return "–";
  return n < 10 && n > 0 ? `${n.toFixed(1)}/s` : `${fmtCount(n)}/s`;
}

export function stateBadge(state) {
  return el("span", { class: `state state-${state}`, dataset: { state } }, state);
}

export function sum(items, pick) {
  return items.reduce((total, item) => total + (pick(item) || 0), 0);
}

// Newest samples kept per series in the browser (the service keeps its own bound).
export const KEEP_SAMPLES = 300;

export function appendSamples(series, samples) {
  series.push(...samples);
  if (series.length > KEEP_SAMPLES) series.splice(0, series.length - KEEP_SAMPLES);
}
