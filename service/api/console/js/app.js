// The console's router: #/ (pipelines), #/pipelines/NAME, #/pipelines/NAME/edit, #/new.
// Each page returns a function that stops what it started (timers, the live tail).

import { setUpToken } from "./api.js";
import { renderEditor } from "./editor.js";
import { renderPipeline } from "./pipeline.js";
import { renderPipelines } from "./pipelines.js";
import { el } from "./util.js";

const view = document.getElementById("view");
let stop = null;
let generation = 0;

function route() {
  const hash = location.hash || "#/";
  const parts = hash.slice(2).split("/").map(decodeURIComponent);
  if (parts[0] === "new") return ["new", renderEditor, {}];
  if (parts[0] === "pipelines" && parts[1] && parts[2] === "edit") {
    return ["new", renderEditor, { name: parts[1] }];
  }
  if (parts[0] === "pipelines" && parts[1]) return ["pipelines", renderPipeline, { name: parts[1] }];
  return ["pipelines", renderPipelines, {}];
}

async function show() {
  generation += 1;
  const mine = generation;
  if (stop) stop();
  stop = null;
  const [nav, render, params] = route();
  for (const link of document.querySelectorAll("[data-nav]")) {
    link.classList.toggle("on", link.dataset.nav === nav);
  }
  const page = el("div", { class: "page" });
  view.replaceChildren(page);
  try {
    const cleanup = await render(page, params);
    if (mine === generation) stop = cleanup;
    else if (cleanup) cleanup();
  } catch (error) {
    if (mine !== generation) return;
    page.replaceChildren(
      el("h1", {}, "Something went wrong"),
      el("p", { class: "status" }, `${error.status ? `${error.status}: ` : ""}${error.message}`),
      el("p", {}, el("a", { href: "#/" }, "Back to the pipelines")),
    );
  }
}

setUpToken();
window.addEventListener("hashchange", show);
show();
