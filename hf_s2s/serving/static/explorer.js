// The attention explorer of `hf-s2s serve`: translate sentences through this server's API (GET models, POST
// translate and POST score, relative to the page, so a path prefix of a reverse proxy is kept) and show, for each
// sentence, the attention that produced its translation (panel.js, heatmap.js). Plain JavaScript modules, no
// framework, no build step: the page loads nothing from another host.
//
// The page asks for one attention map per hypothesis (the view shown), not every layer and head: another view is
// asked for when the user switches to it. A request in flight marks the results on screen as the previous
// request's, can be cancelled, and gives up after a timeout; a refused request leaves them, so marked, in place.
// The URL's fragment restores what is on screen (sentences, model, search, view): each panel links to its own view.

import { call } from "./api.js";
import { element } from "./heatmap.js";
import { apiView, Panel } from "./panel.js";

const byId = (id) => document.getElementById(id);
// A line that holds nothing to translate: whitespace, control and format characters (the server's is_blank)
const BLANK = /^[\s\p{Cc}\p{Cf}]*$/u;
const DEFAULT_VIEW = { kind: "cross", layer: null, head: "mean", word: false };
const DEFAULT_DISPLAY = { scale: "unit", palette: "viridis", argmax: false, fit: true, cell: 24 };

const state = { models: [], controller: null, cards: [] };

// ------------------------------------------------------------------------------------------------ errors and status

function showError(title, message, body) {
  const box = byId("error");
  box.replaceChildren(element("strong", { text: title }), " ", element("span", { class: "message", text: message }));
  if (body !== undefined) {
    box.append(element("details", {}, element("summary", { text: "The server's answer (JSON)" }),
                       element("pre", { text: JSON.stringify(body, null, 2) })));
  }
  box.hidden = false;
}

function clearError() {
  byId("error").hidden = true;
  byId("error").replaceChildren();
}

function setStatus(text) {
  byId("status").textContent = text;
}

// Mark the results on screen as answering an earlier request (``why``), or as current (null).
function markStale(why) {
  const results = byId("results");
  results.classList.toggle("stale", Boolean(why));
  byId("stale-note").hidden = !why;
  byId("stale-note").textContent = why || "";
}

// ------------------------------------------------------------------------------------------------------- the models

function modelNamed(name) {
  return state.models.find((model) => model.name === name);
}

function selectedModel() {
  return modelNamed(byId("model").value);
}

function hasAttention(model) {
  return Object.keys(model.attention || {}).length > 0;
}

function modelChanged() {
  const model = selectedModel();
  const box = byId("attention");
  if (!model) return;
  if (!hasAttention(model)) {  // the server would refuse the request: say why instead
    if (!box.disabled) box.dataset.chosen = String(box.checked);
    box.checked = false;
    box.disabled = true;
    byId("attention-help").textContent = model.engine === "torch" ? "this model has no attention"
      : `the ${model.engine} engine gives none`;
  } else if (box.disabled) {
    box.disabled = false;
    box.checked = box.dataset.chosen !== "false";
    byId("attention-help").textContent = "";
  }
  byId("beams").placeholder = `${model.num_beams} (model's)`;
  if (model.max_beams) {
    byId("beams").max = String(model.max_beams);
    byId("nbest").max = String(model.max_beams);
  }
  const limits = [`${model.name} reads at most ${model.max_sentence_tokens} source tokens a sentence (</s> included)`];
  if (model.max_sentences) limits.push(`${model.max_sentences} sentences a request`);
  if (model.max_beams) limits.push(`${model.max_beams} beams`);
  byId("limits").textContent = `${limits.join("; at most ")}.`;
}

function modelLabel(model) {
  const attention = model.attention_type ? `, ${model.attention_type} attention` : "";
  return `${model.name} (${model.model_type}${attention}, ${model.engine} ${model.weights})`;
}

async function loadModels() {
  const answer = await call("models");
  if (!answer.ok) {
    showError(answer.title, answer.message, answer.body);
    byId("served").textContent = "No models: the server did not answer.";
    return false;
  }
  state.models = answer.body;
  const select = byId("model");
  for (const model of state.models) {
    select.append(element("option", { value: model.name, text: modelLabel(model) }));
    if (model.default) select.value = model.name;
  }
  select.disabled = state.models.length < 2;
  byId("served").textContent = state.models.length === 1 ? `Serving one model: ${state.models[0].name}.`
    : `Serving ${state.models.length} models: ${state.models.map((model) => model.name).join(", ")}.`;
  modelChanged();
  return true;
}

// ---------------------------------------------------------------------------------------------------- the request

// A whole number >= 1 from a number field, undefined where it is empty; throws where it holds no number.
function wholeNumber(input, name) {
  if (input.validity.badInput) throw new Error(`${name} is not a number.`);
  if (input.value.trim() === "") return undefined;
  return Number(input.value);  // the server refuses what is not a whole number >= 1, and says why
}

function inputLines() {
  const lines = byId("sentences").value.split(/\r?\n/);
  while (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();  // the newline ending the last line
  return lines;
}

function setInFlight(flight) {
  byId("translate").disabled = Boolean(flight);
  byId("cancel").hidden = !flight;
  byId("results").setAttribute("aria-busy", String(Boolean(flight)));
}

function plural(count, word) {
  return `${count} ${word}${count === 1 ? "" : "s"}`;
}

// Translate the form's sentences; ``restore``: the view, display and choices a URL asked for.
async function translate(event, restore = null) {
  if (event) event.preventDefault();
  clearError();
  const lines = inputLines();
  if (lines.every((line) => BLANK.test(line))) {
    showError("Nothing to translate:", "type or paste at least one sentence.");
    byId("sentences").focus();
    return;
  }
  const model = selectedModel();
  const request = { sentences: lines, model: byId("model").value, scores: true };
  let beams, nbest;
  try {
    beams = wholeNumber(byId("beams"), "Beams");
    nbest = wholeNumber(byId("nbest"), "n-best");
    if (beams !== undefined) request.num_beams = beams;
    if (nbest !== undefined) request.num_return_sequences = nbest;
  } catch (error) {
    showError("Not sent:", error.message);
    return;
  }
  const view = { ...DEFAULT_VIEW, ...(restore ? restore.view : {}) };
  if (byId("attention").checked) request.attention = apiView(view);
  if (state.controller) state.controller.abort();
  const controller = new AbortController();
  state.controller = controller;
  if (state.cards.length) markStale("These results answer the previous request; a new one is on its way.");
  setInFlight(true);
  setStatus(`Translating ${plural(lines.length, "sentence")} with ${request.model}…`);
  const answer = await call("translate", request, { signal: controller.signal });
  if (state.controller !== controller) return;  // a newer request took over
  state.controller = null;
  setInFlight(false);
  if (!answer.ok) {
    setStatus(answer.kind === "cancelled" ? "Cancelled." : "");
    if (answer.kind !== "cancelled") showError(answer.title, answer.message, answer.body);
    markStale(state.cards.length ? "These results answer the previous request, not the one above." : null);
    return;
  }
  markStale(null);
  const asked = { model: request.model, beams, nbest };
  showResults(lines, answer.body, model, asked, restore);
  history.replaceState(null, "", `#${formParameters(lines, asked).toString()}`);
  setStatus(`Translated ${plural(lines.length, "sentence")} with ${answer.body.model}.`);
}

function cancel() {
  if (state.controller) state.controller.abort();
}

// ---------------------------------------------------------------------------------------------------- the answers

function showResults(sources, answer, model, asked, restore) {
  const results = byId("results");
  results.dataset.model = answer.model;
  state.cards = answer.translations.map((translation, index) =>
    card(index, sources[index], translation, answer, model, asked, restore));
  results.replaceChildren(...state.cards.map((c) => c.element));
  if (restore && restore.compare) {
    for (const c of state.cards) if (c.compareWith) c.compareWith(restore.compare, restore);
  }
}

function card(index, source, translation, answer, model, asked, restore) {
  const number = index + 1;
  const id = `result-${number}`;
  const section = element("section", { class: "result", "aria-labelledby": `${id}-title`, id });
  const blank = BLANK.test(source);
  section.append(element("h2", { id: `${id}-title`, text: `Sentence ${number}${blank ? " (blank line)" : ""}` }));
  section.append(element("p", { class: "source" }, element("span", { class: "label", text: "Source" }),
                         element("span", { class: "text", text: source })));
  const found = { element: section, panels: [] };
  if (blank) {
    section.append(element("p", { class: "blank", text: "Nothing to translate: a blank line is left blank." }));
    return found;
  }
  const panels = element("div", { class: "panels" });
  section.append(panels);
  const onChange = () => updateLinks(found, source);
  const main = new Panel({
    sentence: number, source, model, engine: answer.engine, search: answer.search, translation, asked,
    display: { ...DEFAULT_DISPLAY, ...(restore ? restore.display : {}) },
    selected: restore ? restore.selected : 0, onChange,
  });
  found.panels.push(main);
  panels.append(main.element);
  if (restore && restore.yours && main.view) main.force(restore.yours);
  if (!main.view) return found;  // no attention asked for: nothing to compare
  // compare: the same sentence by another model or search, side by side
  const form = element("form", { class: "compare", novalidate: "" });
  const other = element("select", { class: "compare-model" },
                        ...state.models.filter(hasAttention).map((m) => element("option", { value: m.name,
                                                                                            text: m.name })));
  const beams = element("input", { type: "number", class: "compare-beams", min: "1", step: "1",
                                   inputmode: "numeric", placeholder: "model's" });
  const status = element("span", { class: "compare-status", role: "status" });
  form.append(element("span", { class: "label", text: "Compare" }),
              element("label", {}, element("span", { text: "with" }), other),
              element("label", {}, element("span", { text: "beams" }), beams),
              element("button", { type: "submit", class: "secondary", text: "Side by side" }), status);
  section.append(form);
  found.compareWith = async (what, from = null) => {
    const request = { sentences: [source], model: what.model, scores: true,
                      attention: apiView({ ...DEFAULT_VIEW, word: main.view.word }) };
    if (what.beams) request.num_beams = what.beams;
    status.textContent = `Translating with ${what.model}…`;
    const reply = await call("translate", request);
    if (!reply.ok) {
      status.textContent = `${reply.title} ${reply.message}`;
      return;
    }
    status.textContent = "";
    found.panels.slice(1).forEach((panel) => panel.element.remove());
    const second = new Panel({
      sentence: number, source, model: modelNamed(what.model), engine: reply.body.engine, search: reply.body.search,
      translation: reply.body.translations[0], asked: { model: what.model, beams: what.beams },
      display: { ...main.displayChoices(), ...(from ? from.display : {}) }, selected: 0, removable: true,
      onChange: (panel) => {
        if (panel === null) found.panels = found.panels.slice(0, 1);
        onChange();
      },
    });
    found.panels = [main, second];
    panels.append(second.element);
    panels.classList.add("two");
    onChange();
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    let count;
    try {
      count = wholeNumber(beams, "Beams");
    } catch (error) {
      status.textContent = error.message;
      return;
    }
    found.compareWith({ model: other.value, beams: count });
  });
  return found;
}

// ------------------------------------------------------------------------------------------------------- the URL

function formParameters(lines, asked) {
  const parameters = new URLSearchParams();
  parameters.set("s", lines.join("\n"));
  parameters.set("m", asked.model);
  if (asked.beams !== undefined) parameters.set("b", String(asked.beams));
  if (asked.nbest !== undefined && asked.nbest !== 1) parameters.set("n", String(asked.nbest));
  if (!byId("attention").checked) parameters.set("a", "0");
  return parameters;
}

// The link of each panel: its sentence, model, search and view (and the panel it is compared with).
function updateLinks(found, source) {
  found.panels = found.panels.filter((panel) => panel.element.isConnected);
  found.panels.forEach((panel, index) => {
    if (!panel.permalink) return;
    const parameters = formParameters([source], panel.asked);
    if (panel.asked.nbest === undefined) parameters.delete("n");
    const view = panel.state();
    parameters.set("k", view.kind);
    if (view.layer !== null && view.layer !== undefined) parameters.set("l", String(view.layer));
    parameters.set("h", String(view.head));
    if (view.word) parameters.set("w", "1");
    parameters.set("c", view.scale);
    parameters.set("p", view.palette);
    if (view.argmax) parameters.set("x", "1");
    if (!view.fit) parameters.set("z", String(view.cell));
    if (view.selected) parameters.set("y", String(view.selected));
    if (view.yours !== undefined) parameters.set("t", view.yours);
    const other = found.panels[1 - index];
    if (index === 0 && other) {
      parameters.set("cm", other.model.name);
      if (other.asked.beams !== undefined) parameters.set("cb", String(other.asked.beams));
    }
    panel.permalink.href = `#${parameters.toString()}`;
  });
}

function readParameters(hash) {
  const parameters = new URLSearchParams(hash.replace(/^#/, ""));
  if (!parameters.has("s")) return null;
  const number = (name) => (parameters.has(name) && /^\d+$/.test(parameters.get(name))
    ? Number(parameters.get(name)) : undefined);
  const head = parameters.get("h");
  return {
    sentences: parameters.get("s"), model: parameters.get("m"), beams: number("b"), nbest: number("n"),
    attention: parameters.get("a") !== "0",
    view: { kind: parameters.get("k") === "encoder" ? "encoder" : "cross", layer: number("l") ?? null,
            head: head === null || head === "mean" ? "mean" : Number(head), word: parameters.get("w") === "1" },
    display: { ...(parameters.has("c") ? { scale: parameters.get("c") } : {}),
               ...(parameters.has("p") ? { palette: parameters.get("p") } : {}),
               argmax: parameters.get("x") === "1",
               ...(parameters.has("z") ? { fit: false, cell: number("z") } : {}) },
    selected: number("y") || 0, yours: parameters.get("t") ?? undefined,
    compare: parameters.has("cm") ? { model: parameters.get("cm"), beams: number("cb") } : null,
  };
}

// Fill the form from the URL and translate, restoring the view.
function restoreFromUrl() {
  const restore = readParameters(location.hash);
  if (!restore) return;
  byId("sentences").value = restore.sentences;
  if (restore.model && modelNamed(restore.model)) byId("model").value = restore.model;
  modelChanged();
  byId("beams").value = restore.beams === undefined ? "" : String(restore.beams);
  byId("nbest").value = String(restore.nbest || 1);
  if (!byId("attention").disabled) byId("attention").checked = restore.attention;
  translate(null, restore);
}

document.addEventListener("DOMContentLoaded", async () => {
  byId("request").addEventListener("submit", translate);
  byId("model").addEventListener("change", modelChanged);
  byId("cancel").addEventListener("click", cancel);
  if (await loadModels()) {
    restoreFromUrl();
    window.addEventListener("hashchange", restoreFromUrl);  // a link of this page followed in its own tab
  }
});
