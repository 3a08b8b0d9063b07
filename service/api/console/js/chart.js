// A small SVG line chart over time: a few series, the last minutes, min/max labels.
// Plain SVG rather than a chart library: three charts of a few hundred points each.

const NS = "http://www.w3.org/2000/svg";
const W = 600;
const H = 150;
const PAD = { left: 56, right: 8, top: 10, bottom: 20 };

function svg(tag, attrs = {}) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

// series: [{key, label, color, value(sample) -> number|null}]; format(value) for labels.
export function lineChart(container, { id, title, series, format }) {
  const figure = document.createElement("figure");
  figure.className = "chart";
  const caption = document.createElement("figcaption");
  const legend = series.map((s) => `<span class="key" style="--c:${s.color}">${s.label}</span>`);
  caption.innerHTML = `<b>${title}</b> ${legend.join(" ")} <span class="last"></span>`;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title });
  root.dataset.chart = id;
  root.dataset.points = "0";
  figure.append(caption, root);
  container.append(figure);
  const lastLabel = caption.querySelector(".last");

  function update(samples) {
    root.replaceChildren();
    const points = samples.filter((s) => series.some((line) => line.value(s) !== null));
    root.dataset.points = String(points.length);
    const plotW = W - PAD.left - PAD.right;
    const plotH = H - PAD.top - PAD.bottom;
    root.append(
      svg("rect", { x: PAD.left, y: PAD.top, width: plotW, height: plotH, class: "plot" }),
    );
    if (points.length === 0) {
      const empty = svg("text", { x: W / 2, y: H / 2, class: "empty" });
      empty.textContent = "no samples yet";
      root.append(empty);
      lastLabel.textContent = "";
      return;
    }
    const t0 = points[0].at_ms;
    const t1 = Math.max(points[points.length - 1].at_ms, t0 + 1000);
    const values = points.flatMap((p) => series.map((s) => s.value(p))).filter((v) => v !== null);
    let lo = Math.min(0, ...values);
    let hi = Math.max(...values);
    if (hi === lo) hi = lo + 1;
    const x = (t) => PAD.left + ((t - t0) / (t1 - t0)) * plotW;
    const y = (v) => PAD.top + plotH - ((v - lo) / (hi - lo)) * plotH;
    for (const [v, cls] of [[hi, "max"], [lo, "min"]]) {
      const label = svg("text", { x: PAD.left - 4, y: y(v) + 4, class: `axis ${cls}` });
      label.textContent = format(v);
      root.append(label);
    }
    const span = svg("text", { x: W - PAD.right, y: H - 4, class: "axis time" });
    span.textContent = `last ${Math.round((t1 - t0) / 1000)} s`;
    root.append(span);
    for (const line of series) {
      const coords = points
        .map((p) => [p.at_ms, line.value(p)])
        .filter(([, v]) => v !== null)
        .map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`);
      if (coords.length === 0) continue;
      const path = svg("polyline", { points: coords.join(" "), stroke: line.color, class: "line" });
      path.dataset.series = line.key;
      root.append(path);
    }
    const newest = points[points.length - 1];
    lastLabel.textContent = series
      .map((s) => `${s.label} ${s.value(newest) === null ? "–" : format(s.value(newest))}`)
      .join(" · ");
  }

  update([]);
  return { update, element: root };
}
