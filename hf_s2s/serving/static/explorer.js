// The attention explorer of `hf-s2s serve`: translate sentences through this server's API (GET models, POST
// translate, both relative to the page, so a path prefix of a reverse proxy is kept) and draw the attention that
// produced each translation. Plain JavaScript, no framework: the page loads nothing from another host.
//
// A heatmap is an HTML table (role "grid"): a row per attending token (target tokens for the decoder's attention over
// the source, source tokens for the encoder's self-attention), a column per attended source token. Its weights are
// the API's own numbers (`alignment.cross_attentions` / `alignment.encoder_attentions`, layers x heads x rows x
// columns), kept in each cell's data-weight; "mean of heads" averages them here. One cell is in the tab order;
// the arrow keys, Home and End move between cells (a roving tabindex), and each cell's label names its two tokens and
// its weight.

"use strict";

const byId = (id) => document.getElementById(id);

// viridis, as the heatmaps hf-s2s translate --plot-alignment writes: (position in [0, 1], r, g, b)
const VIRIDIS = [
  [0.0, 68, 1, 84], [0.25, 59, 82, 139], [0.5, 33, 145, 140], [0.75, 94, 201, 98], [1.0, 253, 231, 37],
];

function colour(weight) {
  const w = Math.min(1, Math.max(0, weight));
  for (let i = 1; i < VIRIDIS.length; i++) {
    const [end, ...high] = VIRIDIS[i];
    const [start, ...low] = VIRIDIS[i - 1];
    if (w <= end) {
      const t = (w - start) / (end - start);
      const [r, g, b] = low.map((value, k) => Math.round(value + t * (high[k] - value)));
      return `rgb(${r}, ${g}, ${b})`;
    }
  }
  return "rgb(253, 231, 37)";
}

function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  node.append(...children);
  return node;
}

const state = { models: [] };

// ------------------------------------------------------------------------------------------------ errors and status

function showError(title, message, body) {
  const box = byId("error");
  box.replaceChildren(element("strong", { text: title }), " ", element("span", { class: "message", text: message }));
  if (body !== undefined) {
    const details = element("details", {}, element("summary", { text: "The server's answer (JSON)" }),
                            element("pre", { text: JSON.stringify(body, null, 2) }));
    box.append(details);
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

// ------------------------------------------------------------------------------------------------------- the models

function selectedModel() {
  return state.models.find((model) => model.name === byId("model").value);
}

// Whether the model gives attention weights: the torch engine, and a model whose decoder attends to the source.
function hasAttention(model) {
  return model.engine === "torch" && model.attention_type !== "none";
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
}

async function loadModels() {
  let response, body;
  try {
    response = await fetch("models");
    body = await response.json();
  } catch (error) {
    showError("The server could not be reached:", String(error));
    byId("served").textContent = "No models: the server did not answer.";
    return;
  }
  if (!response.ok) {
    showError(`The server refused to list its models (${response.status}):`, body.error || "", body);
    return;
  }
  state.models = body;
  const select = byId("model");
  for (const model of body) {
    const attention = model.attention_type ? `, ${model.attention_type} attention` : "";
    const label = `${model.name} (${model.model_type}${attention}, ${model.engine} ${model.weights})`;
    select.append(element("option", { value: model.name, text: label }));
    if (model.default) select.value = model.name;
  }
  select.disabled = body.length < 2;
  byId("served").textContent = body.length === 1 ? `Serving one model: ${body[0].name}.`
    : `Serving ${body.length} models: ${body.map((model) => model.name).join(", ")}.`;
  modelChanged();
}

// ---------------------------------------------------------------------------------------------------- the request

// A whole number >= 1 from a number field, undefined where it is empty; throws where it holds no number.
function wholeNumber(input, name) {
  if (input.validity.badInput) throw new Error(`${name} is not a number.`);
  if (input.value.trim() === "") return undefined;
  return Number(input.value);  // the server refuses what is not a whole number >= 1, and says why
}

async function translate(event) {
  event.preventDefault();
  clearError();
  const lines = byId("sentences").value.split(/\r?\n/);
  while (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();  // the newline ending the last line
  if (lines.every((line) => line.trim() === "")) {
    showError("Nothing to translate:", "type or paste at least one sentence.");
    byId("sentences").focus();
    return;
  }
  const request = { sentences: lines, model: byId("model").value, scores: true };
  try {
    const beams = wholeNumber(byId("beams"), "Beams");
    const nbest = wholeNumber(byId("nbest"), "n-best");
    if (beams !== undefined) request.num_beams = beams;
    if (nbest !== undefined) request.num_return_sequences = nbest;
  } catch (error) {
    showError("Not sent:", error.message);
    return;
  }
  if (byId("attention").checked) request.output_attentions = true;
  const button = byId("translate");
  button.disabled = true;
  setStatus(`Translating ${lines.length} sentence${lines.length === 1 ? "" : "s"}…`);
  let response, body;
  try {
    response = await fetch("translate", {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(request),
    });
    body = await response.json().catch(() => ({ error: "the answer was not JSON" }));
  } catch (error) {
    showError("The server could not be reached:", String(error));
    setStatus("");
    return;
  } finally {
    button.disabled = false;
  }
  if (!response.ok) {
    const reason = response.statusText ? ` ${response.statusText}` : "";
    showError(`The server refused the request (${response.status}${reason}):`, body.error || "", body);
    setStatus("");
    byId("results").replaceChildren();  // what is there answered another request
    return;
  }
  showResults(lines, body);
  setStatus(`Translated ${lines.length} sentence${lines.length === 1 ? "" : "s"} with ${body.model}.`);
}

// ---------------------------------------------------------------------------------------------------- the answers

function scoreText(score) {
  return score === undefined || score === null ? "" : `score ${score.toFixed(4)}`;
}

function showResults(sources, answer) {
  const results = byId("results");
  results.dataset.model = answer.model;
  results.replaceChildren(...answer.translations.map((translation, index) =>
    resultSection(index, sources[index], translation, modelNamed(answer.model))));
}

function modelNamed(name) {
  return state.models.find((model) => model.name === name) || {};
}

function resultSection(index, source, translation, model) {
  const id = `result-${index}`;
  const section = element("section", { class: "result", "aria-labelledby": `${id}-title` });
  section.append(element("h2", { id: `${id}-title`, text: `Sentence ${index + 1}` }));
  section.append(element("p", { class: "source" }, element("span", { class: "label", text: "Source" }),
                         element("span", { class: "text", text: source })));
  section.append(element("p", { class: "translation" }, element("span", { class: "label", text: "Translation" }),
                         element("span", { class: "text", text: translation.text }),
                         element("span", { class: "score", text: scoreText(translation.score) })));
  if (translation.hypotheses) {
    section.append(element("h3", { text: `${translation.hypotheses.length}-best list` }));
    section.append(element("ol", { class: "nbest" }, ...translation.hypotheses.map((hypothesis) =>
      element("li", {}, element("span", { class: "text", text: hypothesis.text }),
              element("span", { class: "score", text: scoreText(hypothesis.score) })))));
  }
  if (translation.alignment && translation.alignment.cross_attentions) {
    section.append(attentionView(id, translation.alignment, model));
  }
  return section;
}

// ---------------------------------------------------------------------------------------------- the attention view

// The maps a translation's attention offers: each a (layers, heads, rows, columns) array with its row and column
// tokens.
function attentionMaps(alignment, model) {
  const mechanism = model.attention_type ? ` (${model.attention_type})` : "";
  const maps = [{
    key: "cross", name: `decoder over the source${mechanism}`, weights: alignment.cross_attentions,
    rows: alignment.target_tokens, columns: alignment.source_tokens, rowName: "target", columnName: "source",
  }];
  if (alignment.encoder_attentions) {
    maps.push({
      key: "encoder", name: "encoder self-attention", weights: alignment.encoder_attentions,
      rows: alignment.source_tokens, columns: alignment.source_tokens, rowName: "source", columnName: "source",
    });
  }
  return maps;
}

function labelled(text, control) {
  return element("label", {}, element("span", { text }), control);
}

function attentionView(id, alignment, model) {
  const maps = attentionMaps(alignment, model);
  const view = element("div", { class: "attention" });
  view.append(element("h3", { text: "Attention" }));
  const controls = element("div", { class: "controls" });
  const which = element("select", { class: "which" },
                        ...maps.map((map) => element("option", { value: map.key, text: map.name })));
  const layer = element("select", { class: "layer" });
  const head = element("select", { class: "head" });
  if (maps.length > 1) controls.append(labelled("Weights", which));
  controls.append(labelled("Layer", layer), labelled("Head", head));
  const caption = element("p", { class: "caption", id: `${id}-caption` });
  const readout = element("p", { class: "readout", id: `${id}-readout` });
  const holder = element("div", { class: "heatmap-scroll" });
  view.append(controls, element("div", { class: "legend", "aria-hidden": "true" },
                                element("span", { text: "0" }), element("span", { class: "bar" }),
                                element("span", { text: "1" })), caption, readout, holder);

  function fillChoices() {
    const map = maps.find((m) => m.key === which.value);
    const layers = map.weights.length;
    const heads = map.weights[0].length;
    layer.replaceChildren(...map.weights.map((_, l) =>
      element("option", { value: String(l), text: l === layers - 1 && layers > 1 ? `${l} (last)` : String(l) })));
    layer.value = String(layers - 1);
    head.replaceChildren(element("option", { value: "mean", text: `mean of ${heads} head${heads === 1 ? "" : "s"}` }),
                         ...map.weights[0].map((_, h) => element("option", { value: String(h), text: String(h) })));
    // one layer (an RNN) or one head: nothing to choose
    layer.closest("label").hidden = layers < 2;
    head.closest("label").hidden = heads < 2;
  }

  function draw() {
    const map = maps.find((m) => m.key === which.value);
    const l = Number(layer.value);
    const perHead = map.weights[l];
    const matrix = head.value === "mean" ? meanOfHeads(perHead) : perHead[Number(head.value)];
    const layers = map.weights.length;
    const what = layers > 1 ? `layer ${l} of 0-${layers - 1}, ` : "";
    const heads = head.value === "mean" ? `mean of ${perHead.length} heads` : `head ${head.value}`;
    caption.textContent = `${map.name[0].toUpperCase()}${map.name.slice(1)}, ${what}${heads}: a row per `
      + `${map.rowName} token, a column per ${map.columnName} token`;
    holder.replaceChildren(heatmap(matrix, map, caption.id, readout));
    readout.textContent = "Point at a cell or a token, or move through the cells with the arrow keys.";
  }

  which.addEventListener("change", () => { fillChoices(); draw(); });
  layer.addEventListener("change", draw);
  head.addEventListener("change", draw);
  fillChoices();
  draw();
  return view;
}

function meanOfHeads(perHead) {
  return perHead[0].map((row, r) => row.map((_, c) => perHead.reduce((sum, h) => sum + h[r][c], 0) / perHead.length));
}

// ----------------------------------------------------------------------------------------------------- the heatmap

function heatmap(matrix, map, captionId, readout) {
  const table = element("table", { class: "heatmap", role: "grid", "aria-labelledby": captionId });
  const corner = element("th", { class: "corner", scope: "col" },
                         element("span", { text: `${map.rowName} ↓ / ${map.columnName} →` }));
  const head = element("tr", {}, corner, ...map.columns.map((token, c) =>
    element("th", { scope: "col", class: "column-token", "data-col": String(c) },
            element("span", { text: token }))));
  const body = matrix.map((row, r) => element("tr", {},
    element("th", { scope: "row", class: "row-token", "data-row": String(r), text: map.rows[r] }),
    ...row.map((weight, c) => {
      const cell = element("td", {
        tabindex: r === 0 && c === 0 ? "0" : "-1", "data-row": String(r), "data-col": String(c),
        "data-weight": String(weight),
        "aria-label": `${map.rowName} ${map.rows[r]} to ${map.columnName} ${map.columns[c]}: ${weight.toFixed(3)}`,
      });
      cell.style.backgroundColor = colour(weight);
      return cell;
    })));
  table.append(element("thead", {}, head), element("tbody", {}, ...body));

  const cells = () => table.querySelectorAll("td");
  function highlight(row, column) {
    for (const node of table.querySelectorAll("[data-row], [data-col]")) {
      node.classList.toggle("in-row", node.dataset.row === String(row));
      node.classList.toggle("in-column", node.dataset.col === String(column));
    }
  }
  function describeCell(cell) {
    const r = Number(cell.dataset.row);
    const c = Number(cell.dataset.col);
    highlight(r, c);
    readout.textContent = `${map.rowName} ${r} “${map.rows[r]}” → ${map.columnName} ${c} “${map.columns[c]}”: `
      + `${Number(cell.dataset.weight).toFixed(4)}`;
  }
  function describeToken(token) {
    if (token.dataset.row !== undefined) {
      const r = Number(token.dataset.row);
      const best = matrix[r].indexOf(Math.max(...matrix[r]));
      highlight(r, null);
      readout.textContent = `${map.rowName} ${r} “${map.rows[r]}” attends most to ${map.columnName} ${best} `
        + `“${map.columns[best]}”: ${matrix[r][best].toFixed(4)}`;
    } else {
      const c = Number(token.dataset.col);
      const column = matrix.map((row) => row[c]);
      const best = column.indexOf(Math.max(...column));
      highlight(null, c);
      readout.textContent = `${map.columnName} ${c} “${map.columns[c]}” is attended most by ${map.rowName} ${best} `
        + `“${map.rows[best]}”: ${column[best].toFixed(4)}`;
    }
  }
  table.addEventListener("mouseover", (event) => {
    const cell = event.target.closest("td");
    const token = event.target.closest("th.row-token, th.column-token");
    if (cell) describeCell(cell);
    else if (token) describeToken(token);
  });
  table.addEventListener("mouseleave", () => highlight(null, null));
  table.addEventListener("focusin", (event) => {
    if (event.target.matches("td")) describeCell(event.target);
  });
  table.addEventListener("keydown", (event) => {
    const cell = event.target.closest("td");
    if (!cell) return;
    const rows = matrix.length;
    const columns = matrix[0].length;
    let r = Number(cell.dataset.row);
    let c = Number(cell.dataset.col);
    switch (event.key) {
      case "ArrowUp": r = Math.max(0, r - 1); break;
      case "ArrowDown": r = Math.min(rows - 1, r + 1); break;
      case "ArrowLeft": c = Math.max(0, c - 1); break;
      case "ArrowRight": c = Math.min(columns - 1, c + 1); break;
      case "Home": c = 0; if (event.ctrlKey) r = 0; break;
      case "End": c = columns - 1; if (event.ctrlKey) r = rows - 1; break;
      default: return;
    }
    event.preventDefault();
    const next = table.querySelector(`td[data-row="${r}"][data-col="${c}"]`);
    for (const node of cells()) node.tabIndex = -1;
    next.tabIndex = 0;
    next.focus();
  });
  return table;
}

document.addEventListener("DOMContentLoaded", () => {
  byId("request").addEventListener("submit", translate);
  byId("model").addEventListener("change", modelChanged);
  loadModels();
});
