// fitcheck serve: the page. Every request control is built from /api/options (so the page and the CLI
// cannot drift), the page's query string is the API's (every state is a URL), and the answer follows
// the controls: debounced, one request in flight, a stale answer dropped.

const $ = (id) => document.getElementById(id);
const DEBOUNCE_MS = 150;
const HANDLED = new Set(["model", "mode", "profile", "gpu", "vram", "ram"]); // placed by hand, not generated
const NOT_HERE = new Set(["json", "format", "output", "verbose", "brief", "plan", "require", "debug"]);
const PRIMARY = new Set(["precision", "engine", "context", "seq-len", "batch", "kv-dtype", "gpus"]);
const WHAT_IF = ["gpu", "vram", "ram"];
const VIEWS = ["check", "where", "fits"];
const VIEW_OWN = { where: ["kind", "max-price"], fits: ["sort", "top", "min-speed", "family", "kind"] };  // shown
const STATUS = { fits: "FITS", tight: "TIGHT", does_not_fit: "DOES NOT FIT", cannot_run: "CANNOT RUN HERE",
  does_not_fit_on_disk: "DOES NOT FIT ON DISK", unknown: "UNKNOWN" };

const state = { options: [], fields: new Map(), viewFields: { where: new Map(), fits: new Map() }, endpoints: {},
  mode: "inference", view: "check", inFlight: false, again: false };
const takes = (endpoint, param) => (state.endpoints[endpoint]?.params || []).includes(param);

// ---- formatting ---------------------------------------------------------------------------------------------
const num = (x) => Number(x).toLocaleString("en-US", { maximumFractionDigits: 2 });
const gib = (bytes) => (bytes == null ? "unknown" : `${(bytes / 2 ** 30).toFixed(2)} GiB`);
const span = (r, unit) => (r == null ? null : r.low === r.high ? `${num(r.low)} ${unit}` : `${num(r.low)}–${num(r.high)} ${unit}`);
const usd = (x) => `$${x < 10 ? x.toFixed(2) : num(x)}`;
const usdSpan = (r) => (r == null ? null : `${usd(r.low)}–${usd(r.high)}`);
const firstSentence = (text) => (text || "").replace(/^--[a-z-]+( \([^)]*\))?: /, "").split(/(?<=\.)\s/)[0];
const deviceName = (d) => (d.startsWith("gpu") ? d.toUpperCase() : "RAM");

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v == null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  node.append(...children.flat().filter((c) => c != null && c !== false));
  return node;
}

// ---- controls -----------------------------------------------------------------------------------------------
function control(opt, into = state.fields) {
  const id = opt.view ? `${opt.view}-${opt.param}` : `opt-${opt.param}`;
  const label = el("label", { for: id }, opt.label || opt.param);
  const wrap = el("div", { class: "field", "data-param": opt.param, title: opt.help || null });
  const hint = opt.default != null && opt.default !== false ? `${opt.default}` : "default";
  let input, slider = null;
  const logs = opt.type === "int" && opt.low != null && opt.high != null && typeof opt.default === "number"
    && opt.high / Math.max(opt.low, 1) >= 64;
  if (opt.type === "choice") {
    input = el("select", { id });
    if (opt.default == null) input.append(el("option", { value: "" }, "default"));
    for (const c of opt.choices || []) input.append(el("option", { value: String(c) }, String(c)));
  } else if (opt.type === "flag" && opt.default === false) {
    input = el("input", { id, type: "checkbox" });
    wrap.classList.add("check");
  } else if (opt.type === "flag") {  // unset, on or off
    input = el("select", { id }, el("option", { value: "" }, "default"), el("option", { value: "1" }, "on"),
      el("option", { value: "0" }, "off"));
  } else {
    const numeric = (opt.type === "int" || opt.type === "float") && !(opt.choices || []).length;
    input = el("input", { id, type: numeric ? "number" : "text", placeholder: hint, spellcheck: "false",
      inputmode: opt.type === "int" ? "numeric" : null, min: numeric ? opt.low : null, max: numeric ? opt.high : null,
      step: opt.type === "float" ? "any" : null });
    if (logs) {
      slider = el("input", { type: "range", min: Math.ceil(Math.log2(Math.max(opt.low, 1))),
        max: Math.floor(Math.log2(opt.high)), step: 1, "aria-label": `${opt.param} (slider, powers of two)` });
      slider.addEventListener("input", () => { input.value = 2 ** Number(slider.value); syncSlider(); changed(); });
    }
  }
  input.name = opt.param;
  const syncSlider = () => {
    if (!slider) return;
    const v = Number(input.value || opt.default);
    if (v > 0) slider.value = Math.round(Math.log2(v));
    slider.setAttribute("aria-valuetext", num(v));
  };
  input.addEventListener(input.type === "checkbox" || input.tagName === "SELECT" ? "change" : "input",
    () => { syncSlider(); changed(); });
  wrap.append(label, slider ? el("div", { class: "slide" }, slider, input) : input);
  if (opt.help) wrap.append(el("small", { class: "help" }, firstSentence(opt.help)));
  wrap.dataset.modes = (opt.modes || state.modesAll).join(" ");
  if (opt.view) wrap.dataset.views = opt.view;
  const field = { opt, input, wrap, syncSlider };
  field.get = () => (input.type === "checkbox" ? (input.checked ? "1" : "") : input.value.trim());
  field.set = (v) => {
    if (input.type === "checkbox") input.checked = v === true || ["1", "true", "on"].includes(String(v));
    else if (typeof v === "boolean") input.value = v ? "1" : "0";
    else input.value = v == null ? "" : String(v);
    syncSlider();
  };
  field.set(opt.default === false ? false : opt.default);
  if (opt.default != null && input.type !== "checkbox") field.initial = String(opt.default);
  into.set(opt.param, field);
  return wrap;
}

function buildControls(doc) {
  state.options = doc.options;
  state.modesAll = doc.modes;
  const byParam = new Map(doc.options.map((o) => [o.param, o]));
  for (const o of doc.options) {
    if (HANDLED.has(o.param) || NOT_HERE.has(o.param)) continue;
    $(PRIMARY.has(o.param) ? "controls" : "controls-more").append(control(o));
  }
  for (const p of WHAT_IF) {
    const o = byParam.get(p) || { param: p, type: "str", default: null, modes: doc.modes };
    $("whatif").append(control({ ...o, label: `as if: ${p}` }));
  }
  state.endpoints = doc.endpoints;
  for (const [view, shown] of Object.entries(VIEW_OWN)) {  // each view's own options, as its endpoint lists them
    for (const o of doc.endpoints[`/api/${view}`].options) {
      if (shown.includes(o.param)) $("view-controls").append(control({ ...o, view }, state.viewFields[view]));
    }
  }
  const groups = new Map();
  for (const p of doc.profiles) {
    if (!groups.has(p.kind)) groups.set(p.kind, el("optgroup", { label: p.kind }));
    groups.get(p.kind).append(el("option", { value: p.name, title: p.description }, p.name));
  }
  $("profile").append(...groups.values());
  $("modes").append(...doc.modes.map((m) => el("button", { type: "button", name: "mode", value: m, "data-mode": m, "aria-pressed": "false",
    onclick: () => { state.mode = m; changed(); } }, { lora: "LoRA", qlora: "QLoRA" }[m] || m)));
  $("version").textContent = `fitcheck ${doc.fitcheck_version}`;
}

function showFields() {
  for (const b of document.querySelectorAll("[data-mode]")) b.setAttribute("aria-pressed", String(b.dataset.mode === state.mode));
  for (const b of document.querySelectorAll("[data-view]")) b.setAttribute("aria-pressed", String(b.dataset.view === state.view));
  for (const n of document.querySelectorAll("[data-views]")) n.hidden = !n.dataset.views.split(" ").includes(state.view);
  for (const [param, f] of state.fields) {
    f.wrap.hidden = !f.wrap.dataset.modes.split(" ").includes(state.mode) || !takes(`/api/${state.view}`, param);
  }
  for (const [view, fields] of Object.entries(state.viewFields)) {
    for (const f of fields.values()) f.wrap.hidden = view !== state.view;
  }
  for (const p of document.querySelectorAll("[data-view-panel]")) p.hidden = p.dataset.viewPanel !== state.view;
}

// ---- state <-> query string ---------------------------------------------------------------------------------
function query(view = state.view, endpoint = `/api/${view}`) {
  // the API's query for this view: the request's fields the endpoint takes, set and not at their default
  const q = new URLSearchParams();
  const model = $("model").value.trim();
  if (model && takes(endpoint, "model")) q.set("model", model);
  if ($("profile").value && takes(endpoint, "profile")) q.set("profile", $("profile").value);
  if (state.mode !== "inference") q.set("mode", state.mode);
  const own = state.viewFields[view] || new Map();
  for (const [param, f] of [...state.fields, ...own]) {
    const v = f.get();
    const mine = own.get(param) === f;
    if (v === "" || v === f.initial || !takes(endpoint, param) || (!mine && own.has(param))) continue;
    if (!mine && !(f.opt.modes || []).includes(state.mode)) continue;
    q.set(param, v);
  }
  return q;
}

function pageQuery() {  // the page's URL: the whole request (a view that takes less keeps it), the view and its own
  const q = query("check");
  if (state.view !== "check") {
    q.set("view", state.view);
    for (const [param, v] of query(state.view)) if (state.viewFields[state.view].has(param)) q.set(param, v);
  }
  if ($("against").value !== "context") q.set("against", $("against").value);
  return q;
}

function restore(params) {
  state.view = VIEWS.includes(params.get("view")) ? params.get("view") : "check";
  state.mode = state.modesAll.includes(params.get("mode")) ? params.get("mode") : "inference";
  $("model").value = params.get("model") || "";
  $("profile").value = params.get("profile") || "";
  if (params.get("profile") && $("profile").value !== params.get("profile")) {  // a file or a saved profile
    $("profile").append(el("option", { value: params.get("profile") }, params.get("profile")));
    $("profile").value = params.get("profile");
  }
  $("against").value = params.get("against") === "batch" ? "batch" : "context";
  const own = state.viewFields[state.view] || new Map();
  for (const [param, f] of state.fields) {
    if (params.has(param) && !own.has(param)) {
      f.set(params.get(param));
      if (f.wrap.closest("details")) $("more").open = true;
    }
  }
  for (const [param, f] of own) if (params.has(param)) f.set(params.get(param));
}

// ---- the answer ---------------------------------------------------------------------------------------------
let timer = null;
function changed() {
  showFields();
  history.replaceState(null, "", `${location.pathname}?${pageQuery()}`.replace(/\?$/, ""));
  clearTimeout(timer);
  timer = setTimeout(ask, DEBOUNCE_MS);
}

async function ask() {
  if (state.inFlight) { state.again = true; return; }
  const view = state.view;
  const q = query(view).toString();
  if (view !== "fits" && !$("model").value.trim()) { showError(null); $("hint").hidden = false; return; }
  state.inFlight = true;
  $("answer").setAttribute("aria-busy", "true");
  try {
    const reply = await fetch(`/api/${view}?${q}`, { headers: { Accept: "application/json" } });
    const doc = await reply.json().catch(() => ({ error: `the server answered ${reply.status} ${reply.statusText}` }));
    if (view !== state.view || q !== query(view).toString()) return;  // the controls moved on: stale
    if (!reply.ok || doc.error) { showError(doc.error || `HTTP ${reply.status}`); return; }
    showError(null);
    $("hint").hidden = true;
    ({ check: renderCheck, where: renderWhere, fits: renderFits })[view](doc);
  } catch (exc) {
    showError(`cannot reach the fitcheck server (${exc.message})`);
  } finally {
    state.inFlight = false;
    $("answer").setAttribute("aria-busy", "false");
    if (state.again) { state.again = false; ask(); }
  }
}

function showError(message) {
  $("error").hidden = !message;
  $("error").textContent = message || "";
  $("answer").classList.toggle("stale", Boolean(message));
}

function renderCheck(doc) {
  const v = doc.verdict;
  const summary = v.summary.replace(/^[A-Za-z ,]{2,30}:\s*/, "");
  $("verdict").replaceChildren(el("strong", {}, STATUS[v.status] || v.status.toUpperCase()), el("span", {}, summary));
  $("verdict").dataset.status = v.status;
  const r = doc.request;
  const ch = doc.chosen;  // the weights fitcheck chose: the default does not fit (as the CLI's Chosen: line)
  $("chosen").hidden = !ch;
  $("chosen").textContent = ch ? `Chosen: ${r.precision} with ${r.engine}, the best that fits: the default, `
    + `${ch.default.precision} with ${ch.default.engine}, does not (${ch.default.summary.replace(/^[^:]*:\s*/, "")}; `
    + `precision ${ch.default.precision} and engine ${ch.default.engine} ask for it)` : "";
  const training = r.mode !== "inference";
  const length = training ? `sequence ${num(r.seq_len)}` : `context ${num(r.context)}`;
  $("resolved").textContent = `${doc.model.id} (${num(doc.model.params_total / 1e9)}B params) on ${doc.machine.summary}`
    + ` — ${r.mode}, ${r.precision}${r.engine ? `, ${r.engine}` : ""}, ${length} tokens, batch ${num(r.batch)}`;
  renderBars(doc);
  const facts = [];
  const fits = [v.max_context != null && `${training ? "sequence" : "context"} ${num(v.max_context)} tokens`,
    v.max_batch != null && `${training ? "micro-batch" : "batch"} ${num(v.max_batch)}`].filter(Boolean);
  facts.push(["Largest that fits", fits.length ? fits.join("; ") : "nothing at these settings"]);
  const s = doc.speed || {};
  const speed = s.unknown ? `unknown (${s.unknown})` : [
    span(s.decode_tokens_per_s, "tok/s decode") && `${span(s.decode_tokens_per_s, "tok/s decode")} at ${num(s.at_context)} tokens`,
    span(s.prefill_tokens_per_s, "tok/s prefill"), span(s.training_tokens_per_s, "tok/s training"),
    span(s.step_seconds, "s per step"), s.bound && `${s.bound}-bound`].filter(Boolean).join(", ");
  if (speed) facts.push(["Speed", speed]);
  const d = doc.download;
  if (d) {
    facts.push(["Download", `${gib(d.download_bytes)} (${[d.format, d.repo].filter(Boolean).join(", ")})`
      + (d.reason ? ` — ${d.reason}` : d.disk_free_bytes != null ? ` — ${gib(d.disk_free_bytes)} free on disk` : "")]);
    if (d.saves) facts.push(["Saves", `${gib(d.saves.bytes_per_checkpoint)} per checkpoint`]);
  }
  const c = doc.cost;
  if (c) {
    const cost = [c.usd_per_hour != null && `${usd(c.usd_per_hour)}/hour`,
      usdSpan(c.usd_per_million_tokens) && `${usdSpan(c.usd_per_million_tokens)} per million tokens`,
      usdSpan(c.amortized_usd_per_million_tokens) && `${usdSpan(c.amortized_usd_per_million_tokens)} per million tokens owned`
        + ` (${usdSpan(c.electricity_usd_per_million_tokens)} of it electricity)`].filter(Boolean);
    if (cost.length) facts.push(["Cost", cost.join(", ")]);
  }
  $("facts").replaceChildren(...facts.flatMap(([k, t]) => [el("dt", {}, k), el("dd", {}, t)]));
  const plot = query("check", "/api/plot.svg");
  if ($("against").value === "batch") plot.set("against", "batch");
  const src = `/api/plot.svg?${plot}`;
  if ($("plot-img").getAttribute("src") !== src) $("plot-img").src = src;
  renderAlternatives(doc.alternatives || []);
}

function renderBars(doc) {
  const free = new Map((doc.verdict.devices || []).map((d) => [d.device, d]));
  $("bars").replaceChildren(...doc.estimate.devices.map((dev) => {
    const judged = free.get(dev.device) || {};
    const total = dev.total_bytes;
    const scale = Math.max(total, judged.free_bytes || 0) || 1;
    const parts = Object.entries(dev.components).filter(([, b]) => b > 0);
    const over = judged.free_bytes != null && total > judged.free_bytes;
    return el("div", { class: "bar-row", "data-device": dev.device },
      el("div", { class: "bar-label" }, el("strong", {}, deviceName(dev.device)),
        ` needs ${gib(total)} of ${gib(judged.free_bytes)} free` + (over ? `, over by ${gib(total - judged.free_bytes)}` : "")),
      el("div", { class: "bar", role: "img", "aria-label": `${deviceName(dev.device)}: ${gib(total)} needed, ${gib(judged.free_bytes)} free` },
        parts.map(([name, b], i) => el("span", { class: `seg c${i % 8}`, style: `width:${(100 * b) / scale}%`, title: `${name} ${gib(b)}` })),
        judged.free_bytes != null && el("span", { class: "free-mark", style: `left:${(100 * judged.free_bytes) / scale}%`,
          title: `free ${gib(judged.free_bytes)}` })),
      el("ul", { class: "legend" }, parts.map(([name, b], i) => el("li", {}, el("i", { class: `c${i % 8}` }), `${name} ${gib(b)}`)),
        judged.free_bytes != null && el("li", { class: "free" }, el("i", { class: "free-key" }), `free ${gib(judged.free_bytes)}`)));
  }));
}

function renderAlternatives(alternatives) {
  const box = $("alternatives");
  if (!alternatives.length) { box.replaceChildren(); return; }
  box.replaceChildren(el("h2", {}, "What fits instead (best first)"), el("ol", { class: "alts" }, alternatives.map((a) =>
    el("li", { class: "alt", "data-status": a.status },
      el("p", {}, el("strong", {}, a.title), ` — ${STATUS[a.status] || a.status}, needs ${gib(a.total_bytes)}`
        + (altSpeed(a.speed) ? `; ${altSpeed(a.speed)}` : "")),
      commandLine(a.fitcheck_command), commandLine(a.engine_command),
      el("button", { type: "button", class: "take", onclick: () => take(a.changes) }, "Take it")))));
}

function altSpeed(s) {  // the alternative's speed, as the CLI's line gives it
  if (!s) return "";
  if (s.training_tokens_per_s) return `${span(s.training_tokens_per_s, "tok/s")} training`;
  return s.decode_tokens_per_s ? `${span(s.decode_tokens_per_s, "tok/s")} decode` : "";
}

function commandLine(text) {
  if (!text) return null;
  const button = el("button", { type: "button", class: "copy", "aria-label": `Copy: ${text}` }, "Copy");
  button.addEventListener("click", () => copy(text, button));
  return el("div", { class: "cmd" }, el("code", {}, text), button);
}

async function copy(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {  // no clipboard API outside a secure context (http on another host): the old way
    const area = el("textarea", { readonly: true, style: "position:fixed;opacity:0" });
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  button.textContent = "Copied";
  setTimeout(() => { button.textContent = "Copy"; }, 1500);
}

function take(changes) {
  for (const [name, value] of Object.entries(changes || {})) {
    if (name === "mode") { state.mode = value; continue; }
    const opt = state.options.find((o) => o.name === name || o.param === name || o.param === name.replaceAll("_", "-"));
    const field = opt && state.fields.get(opt.param);
    if (!field) continue;
    field.set(value);
    if (field.wrap.closest("details")) $("more").open = true;
  }
  changed();
  $("verdict").scrollIntoView({ block: "nearest" });
}

// ---- the other views ----------------------------------------------------------------------------------------
function checkLink(fields, text) {
  const q = new URLSearchParams(Object.entries(fields).filter(([, v]) => v != null && v !== ""));
  return el("a", { href: `/?${q}` }, text);
}

function table(head, rows) {
  return el("div", { class: "scroll" }, el("table", {}, el("thead", {}, el("tr", {}, head.map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((c) => el("td", {}, c)))))));
}

function renderWhere(doc) {
  const model = $("model").value.trim();
  const rows = doc.machines.map((m) => [
    checkLink({ model, profile: m.name, precision: m.precision, engine: m.engine }, m.name), m.kind,
    `${m.precision} ${m.engine}${m.precision_choice === "best_fitting" ? "*" : ""}`,
    `${gib(m.need_bytes)} of ${gib(m.free_bytes)}`, span(m.decode_tokens_per_s, "tok/s") || "unknown",
    m.usd_per_hour != null ? `${usd(m.usd_per_hour)}/h` : "owned",
    usdSpan(m.usd_per_million_tokens) || usdSpan(m.amortized_usd_per_million_tokens) || "—"]);
  const others = [...doc.not_fitting, ...doc.cannot_run];
  $("where-view").replaceChildren(el("h2", {}, `Machines for ${doc.model.id}, cheapest first`),
    rows.length ? table(["profile", "kind", "runs as", "memory needed", "decode", "price", "$/M tokens"], rows)
      : el("p", {}, "No hardware profile runs it at these settings."),
    rows.some((r) => r[2].endsWith("*")) && el("p", { class: "note" }, "* the machine's default precision does not fit; the row is what fits there."),
    others.length > 0 && el("details", {}, el("summary", {}, `${others.length} other profiles do not fit or cannot run it`),
      el("ul", {}, others.map((o) => el("li", {}, el("strong", {}, o.name), ` — ${o.reason}`)))));
}

function renderFits(doc) {
  const profile = doc.profile || $("profile").value;
  const rows = doc.models.map((m) => [
    checkLink({ model: m.id, profile, mode: doc.request.mode !== "inference" ? doc.request.mode : null,
      precision: m.precision, engine: m.engine }, m.id),
    `${num(m.params / 1e9)}B`, `${m.precision} ${m.engine || ""}`, `${gib(m.need_bytes)} of ${gib(m.free_bytes)}`,
    span(m.decode_tokens_per_s || m.training_tokens_per_s, "tok/s") || "unknown", m.score ? String(Math.round(m.score.total)) : "—"]);  // the whole number the CLI shows and ranks by
  $("fits-view").replaceChildren(el("h2", {}, `Models that fit on ${doc.machine}`),
    rows.length ? table(["model", "params", "runs as", "memory needed", "speed", "score"], rows)
      : el("p", {}, "No catalog model fits at these settings."),
    el("p", { class: "note" }, `${doc.ranking.fitting} fit; ${doc.not_fitting.length} do not.`));
}

// ---- model completion ---------------------------------------------------------------------------------------
let completing = null;
async function complete() {
  const text = $("model").value.trim();
  const mine = (completing = text);
  if (text.length < 2) return;
  try {
    const reply = await fetch(`/api/models?${new URLSearchParams({ q: text, limit: 20 })}`);
    const doc = await reply.json();
    if (mine !== completing || !reply.ok) return;
    $("model-list").replaceChildren(
      ...(doc.local || []).map((m) => el("option", { value: m.id }, `on this machine (${m.source})`)),
      ...(doc.models || []).map((m) => el("option", { value: m.id }, (m.aliases || []).join(", "))));
  } catch { /* completion is a help, not a need */ }
}

// ---- start --------------------------------------------------------------------------------------------------
async function start() {
  let doc;
  try {
    const reply = await fetch("/api/options");
    doc = await reply.json();
    if (!reply.ok) throw new Error(doc.error || reply.status);
  } catch (exc) {
    showError(`cannot read the options from the fitcheck server (${exc.message})`);
    return;
  }
  buildControls(doc);
  restore(new URLSearchParams(location.search));
  let typing = null;
  $("model").addEventListener("input", (e) => {
    clearTimeout(typing);
    typing = setTimeout(complete, DEBOUNCE_MS);
    const picked = !e.inputType || e.inputType === "insertReplacementText"
      || [...$("model-list").options].some((o) => o.value === $("model").value);
    if (picked) changed();  // a pick from the list; typed text waits for Enter or leaving the box
  });
  $("model").addEventListener("change", changed);
  $("profile").addEventListener("change", changed);
  $("against").addEventListener("change", changed);
  $("form").addEventListener("submit", (e) => { e.preventDefault(); changed(); });
  $("plot-img").addEventListener("load", () => { $("plot").hidden = false; });
  $("plot-img").addEventListener("error", () => { $("plot").hidden = true; });
  for (const b of document.querySelectorAll("[data-view]")) b.addEventListener("click", () => { state.view = b.dataset.view; changed(); });
  changed();
}

start();
