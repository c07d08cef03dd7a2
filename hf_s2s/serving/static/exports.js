// What can be taken away from a map: a picture (PNG, drawn on a canvas; SVG, text a paper's figure can be edited
// from), both with the token labels, the title and the colour legend; and the numbers (CSV, JSON, Pharaoh pairs).
// Each is a file the browser downloads, made here: nothing is sent anywhere.

import { colour, csv, denominators, hardAlignment, pharaoh, record, ticks } from "./maps.js";

const FONT = 13;  // px, labels
const FAMILY = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Noto Sans', sans-serif";

export function download(name, blob) {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
}

let measuring = null;

function textWidth(text, size = FONT) {
  measuring = measuring || document.createElement("canvas").getContext("2d");
  measuring.font = `${size}px ${FAMILY}`;
  return measuring.measureText(text).width;
}

// Where everything of a picture goes, in CSS pixels: the same for PNG and SVG.
function layout(map, title) {
  const cell = Math.max(14, Math.min(28, Math.floor(900 / Math.max(map.columns.length, 1))));
  const margin = 16;
  const rowLabels = Math.ceil(Math.max(...map.rows.map((t) => textWidth(t)), textWidth("m"))) + 8;
  const columnLabels = Math.ceil(Math.max(...map.columns.map((t) => textWidth(t)), textWidth("m"))) + 8;
  const titleHeight = title ? FONT + 12 : 0;
  const left = margin + rowLabels;
  const top = margin + titleHeight + columnLabels;
  const gridWidth = cell * map.columns.length;
  const gridHeight = cell * map.rows.length;
  const legendTop = top + gridHeight + 14;
  const legendWidth = Math.min(240, Math.max(120, gridWidth));
  const width = Math.ceil(Math.max(left + gridWidth, margin + legendWidth + textWidth("0.000") + 8,
                                   margin + (title ? textWidth(title) : 0)) + margin);
  const height = legendTop + 12 + FONT + 10 + margin;
  return { cell, margin, left, top, titleHeight, gridWidth, gridHeight, legendTop, legendWidth, width, height };
}

// The cells' colours under the panel's scale and palette: [row][column] CSS colours.
function cellColours(map, scale, palette) {
  const by = denominators(map.weights, scale);
  return map.weights.map((row, r) => row.map((weight) => colour(weight / by[r], palette)));
}

function gradientStops(palette) {
  return [0, 0.25, 0.5, 0.75, 1].map((p) => [p, colour(p, palette)]);
}

export function png(map, { title, scale, palette, argmax }) {
  const at = layout(map, title);
  const ratio = 2;  // crisp on a paper's page
  const canvas = document.createElement("canvas");
  canvas.width = at.width * ratio;
  canvas.height = at.height * ratio;
  const g = canvas.getContext("2d");
  g.scale(ratio, ratio);
  g.fillStyle = "#fff";
  g.fillRect(0, 0, at.width, at.height);
  g.fillStyle = "#111";
  g.font = `${FONT}px ${FAMILY}`;
  g.textBaseline = "middle";
  if (title) g.fillText(title, at.margin, at.margin + FONT / 2);
  const colours = cellColours(map, scale, palette);
  map.weights.forEach((row, r) => row.forEach((_, c) => {
    g.fillStyle = colours[r][c];
    g.fillRect(at.left + c * at.cell, at.top + r * at.cell, at.cell, at.cell);
  }));
  if (argmax) {
    g.strokeStyle = "#ff2d95";
    g.lineWidth = 2;
    for (const [c, r] of hardAlignment(map)) {
      g.strokeRect(at.left + c * at.cell + 1, at.top + r * at.cell + 1, at.cell - 2, at.cell - 2);
    }
  }
  g.fillStyle = "#111";
  g.textAlign = "right";
  map.rows.forEach((token, r) => g.fillText(token, at.left - 6, at.top + (r + 0.5) * at.cell));
  g.textAlign = "left";
  map.columns.forEach((token, c) => {
    g.save();
    g.translate(at.left + (c + 0.5) * at.cell, at.top - 6);
    g.rotate(-Math.PI / 2);
    g.fillText(token, 0, 0);
    g.restore();
  });
  const gradient = g.createLinearGradient(at.margin, 0, at.margin + at.legendWidth, 0);
  for (const [p, css] of gradientStops(palette)) gradient.addColorStop(p, css);
  g.fillStyle = gradient;
  g.fillRect(at.margin, at.legendTop, at.legendWidth, 12);
  g.fillStyle = "#111";
  g.textAlign = "center";
  for (const [p, label] of ticks(map.weights, scale)) {
    g.fillRect(at.margin + p * at.legendWidth - 0.5, at.legendTop + 12, 1, 4);
    g.fillText(label, at.margin + p * at.legendWidth, at.legendTop + 12 + 4 + FONT / 2 + 2);
  }
  return new Promise((resolve) => canvas.toBlob(resolve, "image/png"));
}

function escapeXml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;",
                                                   "'": "&apos;" })[c]);
}

export function svg(map, { title, scale, palette, argmax }) {
  const at = layout(map, title);
  const colours = cellColours(map, scale, palette);
  const out = [`<svg xmlns="http://www.w3.org/2000/svg" width="${at.width}" height="${at.height}" `
    + `viewBox="0 0 ${at.width} ${at.height}" font-family="${escapeXml(FAMILY)}" font-size="${FONT}">`,
  `<rect width="100%" height="100%" fill="#fff"/>`];
  if (title) out.push(`<text class="title" x="${at.margin}" y="${at.margin + FONT}">${escapeXml(title)}</text>`);
  map.weights.forEach((row, r) => row.forEach((weight, c) => {
    out.push(`<rect class="cell" x="${at.left + c * at.cell}" y="${at.top + r * at.cell}" width="${at.cell}" `
      + `height="${at.cell}" fill="${colours[r][c]}" data-row="${r}" data-col="${c}" data-weight="${weight}"/>`);
  }));
  if (argmax) {
    for (const [c, r] of hardAlignment(map)) {
      out.push(`<rect class="argmax" x="${at.left + c * at.cell + 1}" y="${at.top + r * at.cell + 1}" `
        + `width="${at.cell - 2}" height="${at.cell - 2}" fill="none" stroke="#ff2d95" stroke-width="2"/>`);
    }
  }
  map.rows.forEach((token, r) => out.push(
    `<text class="row" x="${at.left - 6}" y="${at.top + (r + 0.5) * at.cell}" text-anchor="end" `
    + `dominant-baseline="middle">${escapeXml(token)}</text>`));
  map.columns.forEach((token, c) => {
    const x = at.left + (c + 0.5) * at.cell;
    const y = at.top - 6;
    out.push(`<text class="column" x="${x}" y="${y}" transform="rotate(-90 ${x} ${y})" dominant-baseline="middle">`
      + `${escapeXml(token)}</text>`);
  });
  out.push(`<defs><linearGradient id="legend">${gradientStops(palette).map(([p, css]) =>
    `<stop offset="${p}" stop-color="${css}"/>`).join("")}</linearGradient></defs>`);
  out.push(`<rect class="legend" x="${at.margin}" y="${at.legendTop}" width="${at.legendWidth}" height="12" `
    + `fill="url(#legend)"/>`);
  for (const [p, label] of ticks(map.weights, scale)) {
    const x = at.margin + p * at.legendWidth;
    out.push(`<line x1="${x}" x2="${x}" y1="${at.legendTop + 12}" y2="${at.legendTop + 16}" stroke="#111"/>`,
             `<text class="tick" x="${x}" y="${at.legendTop + 16 + FONT}" text-anchor="middle">${escapeXml(label)}</text>`);
  }
  out.push("</svg>");
  return new Blob([out.join("\n")], { type: "image/svg+xml" });
}

// The file of each format, for sentence ``sentence`` (from 1) and hypothesis ``hypothesis`` (from 0).
export async function exported(format, map, view) {
  const { sentence, hypothesis } = view;
  switch (format) {
    case "png": return png(map, view);
    case "svg": return svg(map, view);
    case "csv": return new Blob([csv(map, sentence, hypothesis)], { type: "text/csv" });
    case "json": return new Blob([JSON.stringify(record({ ...map, head: map.head ?? null }, sentence, hypothesis),
                                                 null, 1)], { type: "application/json" });
    case "pharaoh": return new Blob([`${pharaoh(map)}\n`], { type: "text/plain" });
    default: throw new Error(`no export ${format}`);
  }
}
