// One attention map drawn as an HTML table (role "grid"): a row per attending token or word (target tokens for the
// decoder's attention over the source, source tokens for the encoder's self-attention), a column per attended one.
// The cells hold the server's numbers (data-weight); their colour follows the chosen scale and palette (maps.js).
//
// Readable at any size: the table scrolls in its own box with its column labels pinned to the box's top and its row
// labels to its left; a tooltip at the pointer (or at the focused cell) names the two tokens and the weight; the cell
// size is a CSS variable the panel sets (fit to the width, or the size chosen). Beside the map: each target token's
// probability (cross-attention) and each row's entropy; under it, each column's coverage.
//
// Keyboard: one cell is in the tab order; the arrow keys, Home and End (with Ctrl: the first or last row) move
// between cells (a roving tabindex). The readout follows the focus; pointer events that only come from the map
// scrolling under a still pointer are ignored, so the readout never describes another cell than the one focused.

import { colour, coverage, denominators, entropy, hardAlignment, ink } from "./maps.js";

export function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  node.append(...children);
  return node;
}

let tooltip = null;

function tooltipElement() {
  if (!tooltip) {
    tooltip = element("div", { id: "tooltip", role: "tooltip", hidden: "" });
    document.body.append(tooltip);
  }
  return tooltip;
}

// Show the tooltip near (x, y) in the viewport, kept inside it.
function showTooltip(text, x, y) {
  const tip = tooltipElement();
  tip.textContent = text;
  tip.hidden = false;
  const margin = 12;
  const { width, height } = tip.getBoundingClientRect();
  const left = Math.min(Math.max(4, x + margin), window.innerWidth - width - 4);
  const top = y + margin + height > window.innerHeight ? Math.max(4, y - margin - height) : y + margin;
  tip.style.left = `${left}px`;
  tip.style.top = `${top}px`;
}

export function hideTooltip() {
  if (tooltip) tooltip.hidden = true;
}

function fixed(value, digits) {
  return Number.isFinite(value) ? value.toFixed(digits) : "–";
}

// Draw ``map`` (the server's attention object). options: {palette, scale, argmax, rowName, columnName, captionId};
// readout: the element that describes the cell or token pointed at. Returns the table.
export function heatmap(map, options, readout) {
  const { palette, scale, rowName, columnName } = options;
  const matrix = map.weights;
  const scaleBy = denominators(matrix, scale);
  const marked = new Set(options.argmax ? hardAlignment(map).map(([c, r]) => `${r},${c}`) : []);
  const probabilities = map.row_log_probs ? map.row_log_probs.map(Math.exp) : null;
  const entropies = entropy(map);
  const covered = coverage(map);
  const table = element("table", { class: "heatmap", role: "grid", "aria-labelledby": options.captionId });
  const corner = element("th", { class: "corner", scope: "col" },
                         element("span", { text: `${rowName} ↓ / ${columnName} →` }));
  const diagnostics = [];
  if (probabilities) diagnostics.push(element("th", { scope: "col", class: "diagnostic", title: "probability" }, "p"));
  diagnostics.push(element("th", { scope: "col", class: "diagnostic", title: "entropy of the row (nats)" }, "H"));
  const head = element("tr", {}, corner, ...map.columns.map((token, c) =>
    element("th", { scope: "col", class: `column-token${map.column_special[c] ? " special" : ""}`,
                    "data-col": String(c) }, element("span", { text: token }))), ...diagnostics);
  const body = matrix.map((row, r) => element("tr", {},
    element("th", { scope: "row", class: `row-token${map.row_special[r] ? " special" : ""}`, "data-row": String(r),
                    text: map.rows[r] }),
    ...row.map((weight, c) => {
      const position = weight / scaleBy[r];
      const cell = element("td", {
        tabindex: r === 0 && c === 0 ? "0" : "-1", "data-row": String(r), "data-col": String(c),
        "data-weight": String(weight),
        "aria-label": `${rowName} ${map.rows[r]} to ${columnName} ${map.columns[c]}: ${weight.toFixed(3)}`,
      });
      cell.style.backgroundColor = colour(position, palette);
      if (marked.has(`${r},${c}`)) {
        cell.classList.add("argmax");
        cell.style.color = ink(position, palette);
      }
      return cell;
    }),
    ...(probabilities ? [element("td", { class: "diagnostic probability", "data-row": String(r),
                                         text: fixed(probabilities[r], 2) })] : []),
    element("td", { class: "diagnostic entropy", "data-row": String(r), text: fixed(entropies[r], 2) })));
  const foot = element("tr", { class: "coverage" },
    element("th", { scope: "row", class: "row-token", title: "the attention each column received, summed over the rows" },
            "coverage"),
    ...covered.map((value, c) => element("td", { class: "diagnostic", "data-col": String(c) },
                                          element("span", { text: fixed(value, 2) }))),
    ...diagnostics.map(() => element("td")));
  table.append(element("thead", {}, head), element("tbody", {}, ...body), element("tfoot", {}, foot));

  function highlight(row, column) {
    for (const node of table.querySelectorAll("[data-row], [data-col]")) {
      node.classList.toggle("in-row", node.dataset.row === String(row));
      node.classList.toggle("in-column", node.dataset.col === String(column));
    }
  }
  function cellText(r, c) {
    const probability = probabilities ? `; p(${map.rows[r]}) = ${fixed(probabilities[r], 4)}` : "";
    return `${rowName} ${r} “${map.rows[r]}” → ${columnName} ${c} “${map.columns[c]}”: `
      + `${matrix[r][c].toFixed(4)}${probability}`;
  }
  function describeCell(cell, x, y) {
    const r = Number(cell.dataset.row);
    const c = Number(cell.dataset.col);
    highlight(r, c);
    const text = cellText(r, c);
    readout.textContent = text;
    if (x === undefined) {
      const box = cell.getBoundingClientRect();
      showTooltip(text, box.right, box.bottom);
    } else {
      showTooltip(text, x, y);
    }
  }
  function describeToken(token, x, y) {
    let text;
    if (token.dataset.row !== undefined) {
      const r = Number(token.dataset.row);
      const best = matrix[r].indexOf(Math.max(...matrix[r]));
      highlight(r, null);
      text = `${rowName} ${r} “${map.rows[r]}” attends most to ${columnName} ${best} “${map.columns[best]}”: `
        + `${matrix[r][best].toFixed(4)}; entropy ${fixed(entropies[r], 3)} nats`;
    } else {
      const c = Number(token.dataset.col);
      const column = matrix.map((row) => row[c]);
      const best = column.indexOf(Math.max(...column));
      highlight(null, c);
      text = `${columnName} ${c} “${map.columns[c]}” is attended most by ${rowName} ${best} “${map.rows[best]}”: `
        + `${column[best].toFixed(4)}; coverage ${fixed(covered[c], 3)}`;
    }
    readout.textContent = text;
    showTooltip(text, x, y);
  }

  // Chromium sends mouse events after a scroll at the pointer's old place: they are not the user pointing
  let lastPointer = null;
  table.addEventListener("mousemove", (event) => {
    if (lastPointer && lastPointer.x === event.clientX && lastPointer.y === event.clientY) return;
    lastPointer = { x: event.clientX, y: event.clientY };
    const cell = event.target.closest("td[data-weight]");
    const token = event.target.closest("th.row-token[data-row], th.column-token");
    if (cell) describeCell(cell, event.clientX, event.clientY);
    else if (token) describeToken(token, event.clientX, event.clientY);
  });
  table.addEventListener("mouseleave", () => { lastPointer = null; highlight(null, null); hideTooltip(); });
  table.addEventListener("focusin", (event) => {
    if (event.target.matches("td[data-weight]")) describeCell(event.target);
  });
  table.addEventListener("focusout", () => hideTooltip());
  table.addEventListener("keydown", (event) => {
    const cell = event.target.closest("td[data-weight]");
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
      case "Escape": hideTooltip(); return;
      default: return;
    }
    event.preventDefault();
    const next = table.querySelector(`td[data-row="${r}"][data-col="${c}"]`);
    for (const node of table.querySelectorAll("td[data-weight]")) node.tabIndex = -1;
    next.tabIndex = 0;
    next.focus();  // focusin describes it, after the scroll the focus causes
  });
  return table;
}

// The cell size (CSS pixels) at which ``columns`` columns, the row labels and the diagnostics fit ``width``, within
// [min, max]: an estimate (the border spacing is 2 pixels, 1 for small cells).
export function fittingCell(width, labelWidth, extraWidth, columns, min, max) {
  const room = width - labelWidth - extraWidth - 8;
  const fit = Math.floor(room / columns) - 2;
  return Math.max(min, Math.min(max, fit < 16 ? Math.floor(room / columns) - 1 : fit));
}
