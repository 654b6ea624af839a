// The explanation browser of a poolkit report: renders one page of texts at a time from the embedded JSON.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("explain-data").textContent);
  const items = data.items.map((item, index) => Object.assign({ index: index }, item));
  const state = { key: "index", descending: false, label: "", page: 0 };
  const cards = document.getElementById("cards");
  const select = document.getElementById("class-filter");
  const hasTargets = items.some((item) => item.error !== null);
  const hasProbability = items.some((item) => item.probability !== null);
  const labels = data.label_names || [];

  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }
  function shade(weight, top) {
    const alpha = top > 0 ? (0.8 * weight) / top : 0;
    return "background-color: rgba(214, 48, 39, " + alpha.toFixed(4) + ")";
  }
  function wordSpan(item, i, weights, top) {
    const weight = weights[i];
    const title = escapeHtml(item.words[i]) + ": weight " + weight.toFixed(4);
    const special = item.spans[i] === null ? " special" : "";
    return '<span class="w' + special + '" data-weight="' + weight + '" title="' + title + '" style="' +
      shade(weight, top) + '">' + escapeHtml(item.words[i]) + "</span>";
  }
  function shadedText(item, weights) {
    const top = Math.max.apply(null, weights);
    // spans count code points (Python's offsets), not UTF-16 units: slice the text's code points
    const chars = Array.from(item.text);
    let out = "", last = 0;
    item.words.forEach((word, i) => {
      const span = item.spans[i];
      if (span !== null) {
        out += escapeHtml(chars.slice(last, span[0]).join(""));
        last = span[1];
      }
      out += wordSpan(item, i, weights, top);
    });
    out += escapeHtml(chars.slice(last).join(""));
    return out;
  }
  function layerChart(item) {
    const width = 320, bar = 14, gap = 3, labelWidth = 70;
    const top = Math.max.apply(null, item.layer_weights) || 1;
    let svg = '<svg class="layer-chart" role="img" aria-label="layer weights" width="' + width + '" height="' +
      (item.layer_weights.length * (bar + gap) + 4) + '">';
    item.layer_weights.forEach((weight, i) => {
      const y = i * (bar + gap) + 2, length = ((width - labelWidth - 50) * weight) / top;
      svg += '<text x="0" y="' + (y + bar - 3) + '" font-size="11">' + escapeHtml(item.layer_labels[i]) + "</text>" +
        '<rect class="layer-bar" x="' + labelWidth + '" y="' + y + '" width="' + length.toFixed(2) + '" height="' + bar +
        '" fill="#2b6cb0"><title>' + escapeHtml(item.layer_labels[i]) + ": " + weight.toFixed(4) + "</title></rect>" +
        '<text x="' + (labelWidth + length + 4).toFixed(2) + '" y="' + (y + bar - 3) + '" font-size="11">' +
        weight.toFixed(3) + "</text>";
    });
    return '<div class="layers">layer weights' + svg + "</svg></div>";
  }
  function card(item) {
    let head = '<span class="index">#' + (item.index + 1) + "</span>";
    if (item.prediction !== null) {
      const shown = typeof item.prediction === "number" ? item.prediction.toPrecision(4) : item.prediction;
      head += '<span>prediction <span class="label" data-label="' + escapeHtml(item.prediction) + '">' +
        escapeHtml(shown) + "</span></span>";
    }
    if (item.probability !== null) head += '<span class="confidence">p = ' + item.probability.toFixed(3) + "</span>";
    if (item.target !== null) {
      const wrong = typeof item.target === "string" && item.target !== item.prediction ? " wrong" : "";
      head += '<span class="target' + wrong + '">target ' + escapeHtml(item.target) + "</span>";
    }
    if (item.error !== null && typeof item.target === "string") {  // a class: its probability (the error is 1 - it)
      head += '<span class="error" title="sorted as error = 1 - p(target)">p(target) ' +
        (1 - item.error).toFixed(3) + "</span>";
    } else if (item.error !== null) head += '<span class="error">error ' + item.error.toFixed(3) + "</span>";
    if (item.truncated) head += "<span>(cut at the token limit)</span>";
    let body = '<div class="text">' + shadedText(item, item.weights) + "</div>";
    if (item.rows !== null) {
      body += '<details class="rows"><summary>' + item.rows.length + " heads / queries</summary>" +
        item.rows.map((row, r) => '<div><span class="row-label">' + escapeHtml(item.row_labels[r]) + "</span>" +
          shadedText(item, row) + "</div>").join("") + "</details>";
    }
    if (item.layer_weights !== null) body += layerChart(item);
    return '<article class="card" data-index="' + item.index + '"><div class="head">' + head + "</div>" + body + "</article>";
  }
  function sortValue(item) {
    if (state.key === "prediction") return item.prediction;
    if (state.key === "confidence") return item.probability;
    if (state.key === "error") return item.error;
    return item.index;
  }
  function visible() {
    const chosen = items.filter((item) => !state.label || String(item.prediction) === state.label);
    return chosen.sort((a, b) => {
      const x = sortValue(a), y = sortValue(b);
      const order = x < y ? -1 : x > y ? 1 : a.index - b.index;
      return state.descending ? -order : order;
    });
  }
  function render() {
    const shown = visible();
    const pages = Math.max(1, Math.ceil(shown.length / data.page_size));
    state.page = Math.min(state.page, pages - 1);
    const start = state.page * data.page_size;
    const slice = shown.slice(start, start + data.page_size);
    cards.innerHTML = slice.length ? slice.map(card).join("") : '<p class="empty">no text predicted as this class</p>';
    document.getElementById("page").textContent = "page " + (state.page + 1) + " of " + pages;
    document.getElementById("count").textContent = shown.length + " of " + items.length + " texts";
    document.getElementById("prev").disabled = state.page === 0;
    document.getElementById("next").disabled = state.page >= pages - 1;
    document.querySelectorAll("button.sort").forEach((button) => {
      button.classList.toggle("active", button.dataset.key === state.key);
    });
    select.value = state.label;
  }
  function filterTo(label) {
    state.label = label;
    state.page = 0;
    render();
  }
  const classes = labels.length ? labels : Array.from(new Set(items.map((item) => String(item.prediction))));
  if (data.task === "regression" || data.task === null) {
    document.getElementById("class-controls").hidden = true;
  }
  classes.forEach((label) => {
    const option = document.createElement("option");
    option.value = label;
    option.textContent = label;
    select.appendChild(option);
  });
  document.querySelectorAll("button.sort").forEach((button) => {
    const key = button.dataset.key;
    if ((key === "error" && !hasTargets) || (key === "confidence" && !hasProbability) ||
        (key === "prediction" && data.task === null)) button.hidden = true;
    button.addEventListener("click", () => {
      // a second click on the active key reverses; confidence and error start from the highest
      state.descending = state.key === key ? !state.descending : key === "confidence" || key === "error";
      state.key = key;
      state.page = 0;
      render();
    });
  });
  select.addEventListener("change", () => filterTo(select.value));
  document.getElementById("clear-filter").addEventListener("click", () => filterTo(""));
  cards.addEventListener("click", (event) => {
    const label = event.target.closest(".label");
    if (label) filterTo(label.dataset.label);
  });
  document.getElementById("prev").addEventListener("click", () => { state.page -= 1; render(); });
  document.getElementById("next").addEventListener("click", () => { state.page += 1; render(); });
  render();
})();
