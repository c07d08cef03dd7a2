// One model's answer for one sentence: which model, engine and search made it, its hypotheses (any of which can be
// selected to see its own attention), the user's own translation read by the model (forced decoding), and the
// attention view with its controls, legend, diagnostics and exports. A sentence's card holds one panel, or two side
// by side to compare models or searches.
//
// The maps come from the server: the translate answer holds each hypothesis' map of the view asked for; another view
// (layer, head, kind, words) of a hypothesis is asked of POST score with the hypothesis' own tokens, which reads them
// under teacher forcing exactly as they were generated. Maps are kept per hypothesis and view, so going back is
// instant.

import { call } from "./api.js";
import { download, exported } from "./exports.js";
import { element, fittingCell, heatmap, hideTooltip } from "./heatmap.js";
import { colour, PALETTES, SCALES, ticks, WORD_LEVEL_RULE } from "./maps.js";

// The cell sizes (CSS pixels) the size control and fitting to the width choose between
const MIN_CELL = 4;
const MAX_CELL = 40;
const KIND_NAMES = { cross: "decoder over the source", encoder: "encoder self-attention" };
let panels = 0;

export function viewKey(view) {
  return `${view.kind}|${view.layer}|${view.head}|${view.word ? 1 : 0}`;
}

// The view as the API takes it (head "mean" is null).
export function apiView(view) {
  const found = { kind: view.kind, word_level: Boolean(view.word) };
  if (view.layer !== null && view.layer !== undefined) found.layer = view.layer;
  if (view.head !== "mean" && view.head !== null && view.head !== undefined) found.head = view.head;
  return found;
}

function fromAnswer(attention) {
  return { kind: attention.kind, layer: attention.layer, head: attention.head ?? "mean",
           word: attention.word_level };
}

function labelled(text, control, extra = {}) {
  return element("label", extra, element("span", { text }), control);
}

function options(select, entries, chosen) {
  select.replaceChildren(...entries.map(([value, text]) => element("option", { value: String(value), text })));
  select.value = String(chosen);
}

export function searchText(search) {
  if (!search) return "";
  const beams = search.num_beams === 1 ? "greedy search" : `beam search, ${search.num_beams} beams`;
  const nbest = search.num_return_sequences > 1 ? `, ${search.num_return_sequences}-best` : "";
  const penalty = search.num_beams > 1 ? `, length penalty ${search.length_penalty}` : "";
  return `${beams}${nbest}${penalty}`;
}

function logProbability(entry) {
  return entry.token_log_probs ? entry.token_log_probs.reduce((sum, value) => sum + value, 0) : null;
}

export class Panel {
  // context: {sentence (number from 1), source, model (GET models' entry), engine, search, translation (the answer's
  // entry), display (scale, palette, argmax, fit, cell), selected (a hypothesis, from 0), asked (what the request
  // named: model, beams, nbest), onChange(panel; null once removed), removable}
  constructor(context) {
    Object.assign(this, context);
    this.id = `panel-${++panels}`;
    this.controller = null;
    const translation = context.translation;
    const hypotheses = translation.hypotheses || [translation];
    this.entries = hypotheses.map((hypothesis, index) => ({
      label: hypotheses.length > 1 ? `hypothesis ${index + 1} of ${hypotheses.length}` : "the translation",
      text: hypothesis.text, score: hypothesis.score, tokens: hypothesis.tokens,
      token_log_probs: hypothesis.token_log_probs, maps: new Map(), rank: index,
    }));
    for (const [entry, hypothesis] of this.entries.map((e, i) => [e, hypotheses[i]])) {
      if (hypothesis.attention) entry.maps.set(viewKey(fromAnswer(hypothesis.attention)), hypothesis.attention);
    }
    const first = hypotheses[0].attention;
    this.view = first ? fromAnswer(first) : null;
    this.shape = { ...(this.model.attention || {}) };  // kind -> [layers, heads]
    this.selected = Math.min(context.selected || 0, this.entries.length - 1);
    this.element = this.build();
  }

  // ------------------------------------------------------------------------------------------------ the parts

  build() {
    const panel = element("div", { class: "panel", id: this.id, "data-model": this.model.name });
    this.element = panel;  // show() below marks it busy
    const family = this.model.attention_type ? `${this.model.model_type}, ${this.model.attention_type} attention`
      : this.model.model_type;
    const meta = element("p", { class: "meta" },
                         element("strong", { class: "model-name", text: this.model.name }),
                         ` · ${family} · ${this.engine || this.model.engine} · `,
                         element("span", { class: "search", text: searchText(this.search) }));
    panel.append(meta);
    if (this.removable) {
      const remove = element("button", { type: "button", class: "secondary remove", text: "Remove" });
      remove.addEventListener("click", () => { this.abort(); panel.remove(); this.onChange(null); });
      meta.append(" ", remove);
    }
    this.translationLine = element("p", { class: "translation" });
    panel.append(this.translationLine);
    if (this.search) {
      panel.append(element("p", { class: "score-help", text: `Score: ${this.search.score}.` }));
    }
    this.list = element("ol", { class: "nbest", "aria-label": "Hypotheses: choose one to see its attention" });
    panel.append(this.list);
    if (this.view) {
      panel.append(this.forcedForm(), this.attentionView());
    }
    this.status = element("p", { class: "panel-status", role: "status" });
    panel.append(this.status);
    this.renderEntries();
    if (this.view) this.show();
    return panel;
  }

  renderEntries() {
    const best = this.entries[0];
    const score = best.score === undefined || best.score === null ? "" : `score ${best.score.toFixed(4)}`;
    this.translationLine.replaceChildren(element("span", { class: "label", text: "Translation" }),
                                         element("span", { class: "text", text: best.text }),
                                         element("span", { class: "score", text: score }));
    const listed = this.entries.length > 1 || this.entries.some((entry) => entry.yours);
    this.list.hidden = !listed;
    this.list.replaceChildren(...this.entries.map((entry, index) => {
      const logp = logProbability(entry);
      const scoreText = entry.score === undefined || entry.score === null ? "" : `score ${entry.score.toFixed(4)}`;
      const parts = [element("span", { class: "text", text: entry.text }),
                     element("span", { class: "score", text: scoreText })];
      if (logp !== null) parts.push(element("span", { class: "logp", text: `log p ${logp.toFixed(3)}` }));
      if (entry.yours) parts.unshift(element("span", { class: "yours", text: "yours" }));
      const item = element("li", { class: index === this.selected ? "selected" : "" }, ...parts);
      if (this.view && entry.tokens) {
        const choose = element("button", { type: "button", class: "secondary choose", "aria-pressed": String(index === this.selected),
                                           "aria-label": `Show the attention of ${entry.label}` },
                               index === this.selected ? "shown" : "show");
        choose.addEventListener("click", () => this.select(index));
        item.prepend(choose);
      }
      return item;
    }));
  }

  forcedForm() {
    const form = element("form", { class: "forced", novalidate: "" });
    const input = element("input", { type: "text", class: "forced-text", spellcheck: "false",
                                     placeholder: "type a translation of your own", "aria-describedby": `${this.id}-forced-help` });
    const button = element("button", { type: "submit", class: "secondary", text: "Read it" });
    form.append(labelled("Your translation", input), button,
                element("span", { class: "help", id: `${this.id}-forced-help`,
                                  text: "the model reads it (teacher forcing): its attention and each token's probability" }));
    form.addEventListener("submit", (event) => { event.preventDefault(); this.force(input.value); });
    this.forcedInput = input;
    return form;
  }

  attentionView() {
    const view = element("div", { class: "attention" });
    view.append(element("h3", { text: "Attention" }));
    const controls = element("div", { class: "controls" });
    this.which = element("select", { class: "which" });
    this.layer = element("select", { class: "layer" });
    this.head = element("select", { class: "head" });
    this.word = element("input", { type: "checkbox", class: "word" });
    this.scale = element("select", { class: "scale" });
    this.palette = element("select", { class: "palette" });
    this.argmax = element("input", { type: "checkbox", class: "argmax-toggle" });
    this.fit = element("input", { type: "checkbox", class: "fit" });
    this.cell = element("input", { type: "range", class: "cell-size", min: String(MIN_CELL), max: String(MAX_CELL),
                                   step: "1" });
    const kinds = Object.keys(KIND_NAMES).filter((kind) => this.shape[kind]).map((kind) => [kind, KIND_NAMES[kind]]);
    options(this.which, kinds, this.view.kind);
    options(this.scale, Object.entries(SCALES), this.display.scale);
    options(this.palette, Object.keys(PALETTES).map((name) => [name, name]), this.display.palette);
    this.word.checked = Boolean(this.view.word);
    this.argmax.checked = Boolean(this.display.argmax);
    this.fit.checked = this.display.fit !== false;
    this.cell.value = String(this.display.cell || 24);
    controls.append(labelled("Weights", this.which, kinds.length < 2 ? { hidden: "" } : {}),
                    labelled("Layer", this.layer), labelled("Head", this.head),
                    labelled("Words", this.word, { class: "inline" }),
                    labelled("Colour scale", this.scale), labelled("Colours", this.palette),
                    labelled("Mark each row's maximum", this.argmax, { class: "inline" }),
                    labelled("Fit to width", this.fit, { class: "inline" }), labelled("Cell size", this.cell));
    this.fillChoices();
    this.which.addEventListener("change", () => { this.kindChanged(); });
    this.layer.addEventListener("change", () => { this.view.layer = Number(this.layer.value); this.show(); });
    this.head.addEventListener("change", () => {
      this.view.head = this.head.value === "mean" ? "mean" : Number(this.head.value);
      this.show();
    });
    this.word.addEventListener("change", () => { this.view.word = this.word.checked; this.show(); });
    for (const control of [this.scale, this.palette, this.argmax]) control.addEventListener("change", () => this.draw());
    this.fit.addEventListener("change", () => this.size());
    this.cell.addEventListener("input", () => { this.fit.checked = false; this.size(); });
    this.legend = element("div", { class: "legend" });
    this.caption = element("p", { class: "caption", id: `${this.id}-caption` });
    this.readout = element("p", { class: "readout", "aria-live": "polite" });
    this.holder = element("div", { class: "heatmap-scroll", tabindex: "-1" });
    const exports = element("div", { class: "exports" }, element("span", { class: "label", text: "Export" }));
    for (const [format, text] of [["png", "PNG"], ["svg", "SVG"], ["csv", "CSV"], ["json", "JSON"],
                                  ["pharaoh", "Pharaoh"]]) {
      const button = element("button", { type: "button", class: `secondary export-${format}`, "data-format": format,
                                          text });
      button.addEventListener("click", () => this.export(format));
      exports.append(button);
    }
    this.permalink = element("a", { class: "permalink", href: "#", text: "Link to this view" });
    exports.append(this.permalink);
    this.exportButtons = exports;
    view.append(controls, this.legend, this.caption, this.readout, this.holder, exports);
    if (typeof ResizeObserver !== "undefined") {
      let width = 0;
      new ResizeObserver(() => {
        if (this.holder.clientWidth !== width) { width = this.holder.clientWidth; this.size(); }
      }).observe(this.holder);
    }
    return view;
  }

  // The layer and head choices of the current kind (its shape known from a map of that kind, else from the model).
  fillChoices() {
    const [layers, heads] = this.shape[this.view.kind] || [1, 1];
    options(this.layer, [...Array(layers).keys()].map((l) =>
      [l, l === layers - 1 && layers > 1 ? `${l} (last)` : String(l)]), this.view.layer ?? layers - 1);
    const headChoices = heads > 1 ? [["mean", `mean of ${heads} heads`]] : [];
    options(this.head, [...headChoices, ...[...Array(heads).keys()].map((h) => [h, String(h)])],
            heads > 1 ? this.view.head : 0);
    this.layer.closest("label").hidden = layers < 2;
    this.head.closest("label").hidden = heads < 2;
  }

  kindChanged() {
    this.view.kind = this.which.value;
    const shape = this.shape[this.view.kind];
    if (shape) {  // keep the layer and head where the other kind has them
      const [layers, heads] = shape;
      if (this.view.layer >= layers) this.view.layer = layers - 1;
      if (this.view.head !== "mean" && this.view.head >= heads) this.view.head = "mean";
      this.fillChoices();
    }
    this.show();
  }

  // ------------------------------------------------------------------------------------------------ the map

  entry() {
    return this.entries[this.selected];
  }

  select(index) {
    this.selected = index;
    this.renderEntries();
    this.show();
  }

  abort() {
    if (this.controller) this.controller.abort();
    this.controller = null;
  }

  setBusy(text) {
    const busy = Boolean(text);
    const view = this.element.querySelector(".attention");
    if (view) view.setAttribute("aria-busy", String(busy));
    this.element.classList.toggle("busy", busy);
    this.status.textContent = text || "";
  }

  // A call that did not give a map: say why, and put the controls back on the map still shown.
  failed(answer) {
    this.setBusy("");
    if (answer.kind !== "cancelled") this.status.textContent = `${answer.title} ${answer.message}`;
    if (this.drawn) {
      this.view = { ...this.drawn };
      this.which.value = this.view.kind;
      this.word.checked = Boolean(this.view.word);
      this.fillChoices();
    }
  }

  // Show the current view of the selected entry: from the maps kept, or asked of the server.
  async show() {
    const entry = this.entry();
    const key = viewKey(this.view);
    this.abort();
    if (entry.maps.has(key)) {
      this.setBusy("");
      this.draw();
      return;
    }
    this.controller = new AbortController();
    this.setBusy(`Reading the ${KIND_NAMES[this.view.kind]}…`);
    const answer = await call("score", {
      model: this.model.name, sentences: [this.source], target_tokens: [entry.tokens], attention: apiView(this.view),
    }, { signal: this.controller.signal });
    if (!answer.ok) {
      if (answer.kind !== "cancelled") this.failed(answer);
      return;
    }
    this.controller = null;
    const attention = answer.body.scores[0].attention;
    entry.maps.set(key, attention);
    this.setBusy("");
    this.draw();
  }

  map() {
    return this.entry().maps.get(viewKey(this.view));
  }

  captionText(map) {
    const mechanism = map.kind === "cross" && this.model.attention_type ? ` (${this.model.attention_type})` : "";
    const name = KIND_NAMES[map.kind];
    const layer = map.layers > 1 ? `, layer ${map.layer} of 0-${map.layers - 1}` : "";
    const heads = map.heads === 1 ? ", its one head" : map.head === undefined || map.head === null
      ? `, mean of ${map.heads} heads` : `, head ${map.head} of 0-${map.heads - 1}`;
    const unit = map.word_level ? "word" : "token";
    const [rows, columns] = map.kind === "cross" ? ["target", "source"] : ["source", "source"];
    return `${name[0].toUpperCase()}${name.slice(1)}${mechanism}${layer}${heads} — ${this.entry().label}: a row per `
      + `${rows} ${unit}, a column per ${columns} ${unit}`;
  }

  draw() {
    const map = this.map();
    if (!map) return;
    this.shape[map.kind] = [map.layers, map.heads];
    this.drawn = { ...this.view };
    this.fillChoices();
    const display = this.displayChoices();
    this.caption.textContent = this.captionText(map);
    this.drawLegend(map, display);
    const [rowName, columnName] = map.kind === "cross" ? ["target", "source"] : ["attending", "attended"];
    hideTooltip();
    this.holder.replaceChildren(heatmap(map, { ...display, rowName, columnName, captionId: this.caption.id },
                                        this.readout));
    this.readout.textContent = "Point at a cell or a token, or move through the cells with the arrow keys.";
    this.exportButtons.querySelector(".export-pharaoh").hidden = map.kind !== "cross";
    this.size();
    this.element.dataset.draws = String(Number(this.element.dataset.draws || 0) + 1);
    this.onChange(this);
  }

  displayChoices() {
    return { scale: this.scale.value, palette: this.palette.value, argmax: this.argmax.checked,
             fit: this.fit.checked, cell: Number(this.cell.value) };
  }

  drawLegend(map, display) {
    const bar = element("span", { class: "bar" });
    bar.style.background = `linear-gradient(to right, ${[0, 0.25, 0.5, 0.75, 1].map((p) =>
      `${colour(p, display.palette)} ${p * 100}%`).join(", ")})`;
    const marks = element("span", { class: "ticks" }, ...ticks(map.weights, display.scale).map(([p, label]) => {
      const tick = element("span", { class: "tick", text: label });
      tick.style.left = `${p * 100}%`;
      return tick;
    }));
    const notes = [`colour: ${SCALES[display.scale]}`];
    if (map.word_level) notes.push(`words: ${WORD_LEVEL_RULE}`);
    if (display.argmax) notes.push("outlined: each row's most attended column (</s> left out)");
    notes.push("p: the token's probability; H: the row's entropy (nats); coverage: the attention a column received");
    this.legend.replaceChildren(element("span", { class: "scale-box" }, bar, marks),
                                element("span", { class: "legend-note", text: notes.join(" · ") }));
  }

  // The cells' size: fitted to the box's width, or the size chosen.
  size() {
    const table = this.holder.querySelector("table.heatmap");
    if (!table) return;
    const apply = (cell) => {
      table.style.setProperty("--cell", `${cell}px`);
      table.classList.toggle("small", cell < 16);
    };
    let cell = Number(this.cell.value);
    if (this.fit.checked) {
      const label = table.querySelector("tbody th.row-token");
      const extras = [...table.querySelectorAll("thead th.diagnostic")].reduce((sum, th) => sum + th.offsetWidth, 0);
      cell = fittingCell(this.holder.clientWidth, label ? label.offsetWidth : 0, extras, this.map().columns.length,
                         MIN_CELL, MAX_CELL);
      apply(cell);
      while (cell > MIN_CELL && table.offsetWidth > this.holder.clientWidth) apply(--cell);  // what the estimate missed
      this.cell.value = String(cell);
    }
    apply(cell);
  }

  // ------------------------------------------------------------------------------------------------ actions

  async force(text) {
    if (text.trim() === "") {
      this.status.textContent = "Type a translation to read.";
      this.forcedInput.focus();
      return;
    }
    this.abort();
    this.controller = new AbortController();
    this.setBusy("Reading your translation…");
    const answer = await call("score", {
      model: this.model.name, sentences: [this.source], targets: [text], attention: apiView(this.view),
    }, { signal: this.controller.signal });
    if (!answer.ok) {
      if (answer.kind !== "cancelled") this.failed(answer);
      return;
    }
    this.controller = null;
    const scored = answer.body.scores[0];
    const entry = { label: "your translation", text, score: null, tokens: scored.target_tokens,
                    token_log_probs: scored.token_log_probs, maps: new Map(), yours: true, rank: "yours" };
    entry.maps.set(viewKey(this.view), scored.attention);
    this.entries = [...this.entries.filter((e) => !e.yours), entry];
    this.setBusy("");
    this.select(this.entries.length - 1);
  }

  async export(format) {
    const map = this.map();
    if (!map) return;
    const entry = this.entry();
    const head = map.head === undefined || map.head === null ? "mean" : `h${map.head}`;
    const name = `sentence${this.sentence}-${this.model.name}-${entry.yours ? "yours" : `hyp${entry.rank}`}-`
      + `${map.kind}-l${map.layer}-${head}${map.word_level ? "-words" : ""}`;
    const extension = { png: "png", svg: "svg", csv: "csv", json: "json", pharaoh: "align" }[format];
    const blob = await exported(format, map, { ...this.displayChoices(), title: `${this.source} — ${entry.text}`,
                                               sentence: this.sentence, hypothesis: entry.rank });
    download(`${name.replace(/[^\w.-]+/g, "_")}.${extension}`, blob);
  }

  // What restores this panel's view (the URL's view part).
  state() {
    const display = this.view ? this.displayChoices() : {};
    const entry = this.entry();
    return { ...this.view, ...display, selected: entry.yours ? undefined : this.selected,
             yours: entry.yours ? entry.text : undefined };
  }
}
