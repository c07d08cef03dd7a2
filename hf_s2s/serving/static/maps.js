// What the attention explorer reads off one attention map (the server's `attention` object: rows, columns, weights,
// row_special, column_special, row_log_probs), with no page around it: colours and the colour scale, each row's most
// attended column (the hard alignment, as hf_s2s.inference.attention_maps.hard_alignment computes it), coverage and
// entropy, and the map as the text files the page exports (Pharaoh pairs, CSV, JSON).

// The palettes, as (position in [0, 1], r, g, b) stops: viridis (the one hf-s2s translate --plot-alignment draws) and
// a grey ramp for print.
export const PALETTES = {
  viridis: [[0.0, 68, 1, 84], [0.25, 59, 82, 139], [0.5, 33, 145, 140], [0.75, 94, 201, 98], [1.0, 253, 231, 37]],
  greys: [[0.0, 255, 255, 255], [1.0, 20, 20, 20]],
};

// The colour scales: what a cell's colour is relative to. "row": each row's own maximum, so that diffuse rows
// (encoder self-attention, an untrained RNN) still show where they lean.
export const SCALES = {
  unit: "0 to 1",
  map: "0 to the map's maximum",
  row: "0 to each row's maximum",
};

// How a word-level map merges subword pieces (the server merges them; hf_s2s.inference.attention_maps says the same).
export const WORD_LEVEL_RULE = "a source word's pieces summed, a target word's pieces averaged";

export function rgb(position, palette = "viridis") {
  const stops = PALETTES[palette];
  const w = Math.min(1, Math.max(0, Number.isFinite(position) ? position : 0));
  for (let i = 1; i < stops.length; i++) {
    const [end, ...high] = stops[i];
    const [start, ...low] = stops[i - 1];
    if (w <= end) {
      const t = (w - start) / (end - start);
      return low.map((value, k) => Math.round(value + t * (high[k] - value)));
    }
  }
  return stops[stops.length - 1].slice(1);
}

export function colour(position, palette = "viridis") {
  const [r, g, b] = rgb(position, palette);
  return `rgb(${r}, ${g}, ${b})`;
}

// The text colour that reads on a cell of that colour.
export function ink(position, palette = "viridis") {
  const [r, g, b] = rgb(position, palette);
  return 0.299 * r + 0.587 * g + 0.114 * b > 140 ? "#000" : "#fff";
}

export function mapMaximum(weights) {
  return Math.max(0, ...weights.map((row) => Math.max(...row)));
}

// Each row's denominator under a scale: 1, the map's maximum, or the row's own maximum (never 0).
export function denominators(weights, scale) {
  if (scale === "unit") return weights.map(() => 1);
  if (scale === "map") {
    const top = mapMaximum(weights) || 1;
    return weights.map(() => top);
  }
  return weights.map((row) => Math.max(...row) || 1);
}

// The legend's ticks under a scale: [position in [0, 1], label].
export function ticks(weights, scale) {
  const positions = [0, 0.25, 0.5, 0.75, 1];
  if (scale === "row") return positions.map((p) => [p, `${Math.round(p * 100)}%`]);
  const top = scale === "unit" ? 1 : (mapMaximum(weights) || 1);
  return positions.map((p) => [p, (p * top).toFixed(top >= 0.1 ? 2 : 3)]);
}

// Each non-special row's most attended non-special column, as [column, row] pairs sorted by column then row (the
// order of Pharaoh files); a tie goes to the first column.
export function hardAlignment(map) {
  const columns = map.columns.map((_, c) => c).filter((c) => !map.column_special[c]);
  const pairs = [];
  if (columns.length === 0) return pairs;
  map.weights.forEach((row, r) => {
    if (map.row_special[r]) return;
    let best = columns[0];
    for (const c of columns) if (row[c] > row[best]) best = c;
    pairs.push([best, r]);
  });
  return pairs.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
}

export function pharaoh(map) {
  return hardAlignment(map).map(([c, r]) => `${c}-${r}`).join(" ");
}

// The attention each column received, summed over the rows.
export function coverage(map) {
  return map.columns.map((_, c) => map.weights.reduce((sum, row) => sum + row[c], 0));
}

// Each row's entropy in nats.
export function entropy(map) {
  return map.weights.map((row) => -row.reduce((sum, p) => (p > 0 ? sum + p * Math.log(p) : sum), 0));
}

export const AXES = { cross: ["target", "source"], encoder: ["attending", "attended"] };

function csvField(value) {
  const text = String(value);
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

// The map in long form, as hf-s2s translate --alignments csv writes it: a line per cell.
export function csv(map, sentence, hypothesis) {
  const [rows, columns] = AXES[map.kind];
  const lines = [["sentence", "hypothesis", `${rows}_index`, rows, `${columns}_index`, columns, "weight"]];
  map.weights.forEach((row, r) => row.forEach((weight, c) => {
    lines.push([sentence, hypothesis, r, map.rows[r], c, map.columns[c], weight]);
  }));
  return lines.map((line) => line.map(csvField).join(",")).join("\n") + "\n";
}

// The map as one JSON object, as a line of hf-s2s translate --alignments json holds it.
export function record(map, sentence, hypothesis) {
  const found = { sentence, hypothesis, ...map, alignment: map.kind === "cross" ? pharaoh(map) : null };
  if (map.word_level) found.word_level_rule = WORD_LEVEL_RULE;
  return found;
}
