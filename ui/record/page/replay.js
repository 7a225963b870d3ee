// The replay page of a saved run (engine/record/replay.py inlines this file, plotly.js and the record itself).
// It reads the record (docs/record-format.md) and draws it stage by stage, as the app's home and race pages do.
// All text from the record reaches the page through textContent, or HTML-escaped for plotly's labels (plotly
// renders a subset of HTML in them): a prompt holding a script tag shows as text.
(function () {
  "use strict";
  var R = JSON.parse(document.getElementById("record").textContent);
  var M = R.model, MACHINE = R.machine;
  var COLORS = { primary: "#1f77b4", accent: "#d62728", good: "#2ca02c", muted: "#9aa4b1", warn: "#ff7f0e" };
  var INK = "#1e293b";
  var KINDS = { measured: "Measured", model: "Real values from the model", derived: "Derived from a formula",
                browser: "Computed in this page" };
  // plotly.js's own "Blues" and "RdBu" run the other way from plotly.py's; the app's scales, written out:
  var BLUES = [[0, "#f7fbff"], [0.125, "#deebf7"], [0.25, "#c6dbef"], [0.375, "#9ecae1"], [0.5, "#6baed6"],
               [0.625, "#4292c6"], [0.75, "#2171b5"], [0.875, "#08519c"], [1, "#08306b"]];
  var RDBU = [[0, "#67001f"], [0.1, "#b2182b"], [0.2, "#d6604d"], [0.3, "#f4a582"], [0.4, "#fddbc7"], [0.5, "#f7f7f7"],
              [0.6, "#d1e5f0"], [0.7, "#92c5de"], [0.8, "#4393c3"], [0.9, "#2166ac"], [1, "#053061"]];
  var PALETTE = ["#dbeafe", "#fde68a", "#bbf7d0", "#fecaca", "#e9d5ff", "#fed7aa", "#a5f3fc", "#fbcfe8"];
  var main = document.getElementById("main");

  // ---------------------------------------------------------------------------------------------- helpers

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function add(parent, child) { parent.appendChild(child); return child; }
  function visible(s) {
    s = String(s);
    return s.replace(/ /g, "\u00b7").replace(/\n/g, "\u21b5").replace(/\t/g, "\u21e5") || "\u2205";
  }
  function esc(s) { return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;"); }
  function label(s, n) { var v = visible(s); n = n || 14; return esc(v.length > n + 1 ? v.slice(0, n) + "\u2026" : v); }
  function fmt(x, d) { return (x === null || x === undefined || !isFinite(x)) ? "n/a" : Number(x).toFixed(d); }
  // The saved race's speedup, once: the judged median of the races measured, and the replayed race's own figure
  // only where it differs (ui/record/view.py's wall_speedup says the same on the saved-run page)
  function wallSpeedup(shown, own) {
    var mine = fmt(own, 2) + "x";
    return shown === mine ? mine : shown + " (the race replayed here: " + mine + ")";
  }
  function when() {
    var d = new Date(R.saved_at);
    return isNaN(d) ? R.saved_at : d.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
  }
  var WHERE = MACHINE.device_name + " (" + MACHINE.device + ", " + MACHINE.torch_threads + " threads)";
  function caption(parent, kind, text) {
    var p = add(parent, el("p", { "class": "caption" }));
    var prefix = kind === "measured" ? "Measured on " + WHERE + ", " + when() + ". " : KINDS[kind] + ". ";
    add(p, el("b", {}, prefix));
    p.appendChild(document.createTextNode(text));
    return p;
  }
  function section(title) {
    var s = add(main, el("section", {}));
    add(s, el("h2", {}, title));
    return s;
  }
  function chart(parent, id, traces, layout, height) {
    var d = add(parent, el("div", { "class": "chart", id: id }));
    d.style.height = (height || 400) + "px";  // a resize (responsive) then keeps the height the chart was drawn at
    var base = {
      template: "plotly_white", height: height || 400, font: { size: 15, color: INK },
      margin: { l: 80, r: 20, t: 100, b: 70 },
      legend: { orientation: "h", yanchor: "bottom", y: 1.01, xanchor: "right", x: 1 },
    };
    var lay = Object.assign(base, layout);
    ["xaxis", "yaxis"].forEach(function (a) {
      lay[a] = Object.assign({ tickfont: { size: 15, color: INK }, title: { font: { color: INK } } }, lay[a] || {});
    });
    Plotly.newPlot(d, traces, lay, { displaylogo: false, responsive: true });
    return d;
  }
  // Plotly draws a subset of HTML in titles (<a href>, <b>, <br>...): a title may hold the record's own words (its
  // architecture's layer kinds), so every title is escaped here and none is written with markup.
  function axis(title, extra) { return Object.assign({ title: { text: esc(title) } }, extra || {}); }
  function title(text) {  // top left, above the legend (which sits just above the plot)
    return { text: esc(text), font: { size: 19 }, x: 0, xref: "paper", xanchor: "left", y: 0.985, yref: "container",
             yanchor: "top" };
  }

  function bytes(b64) {
    var bin = atob(b64), u = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) u[i] = bin.charCodeAt(i);
    return u;
  }
  function half(h) {
    var s = (h & 0x8000) ? -1 : 1, e = (h >> 10) & 0x1f, f = h & 0x3ff;
    if (e === 0) return s * Math.pow(2, -14) * (f / 1024);
    if (e === 31) return f ? NaN : s * Infinity;
    return s * Math.pow(2, e - 15) * (1 + f / 1024);
  }
  function array(d) {  // {"dtype", "shape", "base64"} -> Float32Array (row-major)
    var u = bytes(d.base64), v = new DataView(u.buffer), n = d.shape.reduce(function (a, b) { return a * b; }, 1);
    var out = new Float32Array(n);
    if (d.dtype === "float32") for (var i = 0; i < n; i++) out[i] = v.getFloat32(4 * i, true);
    else for (var j = 0; j < n; j++) out[j] = half(v.getUint16(2 * j, true));
    return out;
  }
  function chips(parent, tokens, ids, highlight) {
    var box = add(parent, el("div", { "class": "chips" }));
    tokens.forEach(function (t, i) {
      var c = add(box, el("div", { "class": "chip", title: JSON.stringify(t) }, visible(t)));
      c.style.background = highlight && highlight(i) ? "#fca5a5" : PALETTE[i % PALETTE.length];
      if (ids) add(c, el("small", {}, ids[i]));
    });
    return box;
  }
  function table(parent, head, rows, numeric) {
    var t = add(parent, el("table", {}));
    var tr = add(add(t, el("thead", {})), el("tr", {}));
    head.forEach(function (h, i) { add(tr, el("th", numeric && numeric[i] ? { "class": "num" } : {}, h)); });
    var body = add(t, el("tbody", {}));
    rows.forEach(function (r) {
      var row = add(body, el("tr", {}));
      r.forEach(function (v, i) { add(row, el("td", numeric && numeric[i] ? { "class": "num" } : {}, v)); });
    });
    return t;
  }

  // ---------------------------------------------------------------------------------------------- provenance

  function provenance() {
    var box = document.getElementById("provenance");
    var dl = add(box, el("dl", {}));
    var id = M.identity || {};
    var cal = MACHINE.calibration;
    var libs = Object.keys(MACHINE.libraries || {}).map(function (k) { return k + " " + MACHINE.libraries[k]; });
    var rows = [
      ["Model", M.name + " \u2014 " + M.source],
      ["Architecture", M.model_type + ": " + M.n_layers + " layers, " + M.n_heads + " query heads, " + M.n_kv_heads +
        " KV heads of " + M.head_dim + ", hidden " + M.hidden_size + ", vocabulary " + M.vocab_size.toLocaleString()],
      ["Precision, engine", M.precision + " on " + M.device + ", " + M.engine_mode + " mode"],
      ["Weights (SHA-256)", id.weights_sha256 ? id.weights_sha256 + " (" + id.how + ")" : "not known (" + id.how + ")"],
      ["Recorded", when() + " by " + R.saved_by],
      ["Machine", WHERE + "; " + MACHINE.os + "; Python " + MACHINE.python + "; " + libs.join(", ")],
      ["Load while measured", cal ? cal.described + (cal.flags.length ? " \u2014 " + cal.flags.join(" ") : "")
        : "not measured under the noise guard (load average when saved: " + fmt(MACHINE.load_avg_at_save, 2) + ")"],
    ];
    rows.forEach(function (r) { add(dl, el("dt", {}, r[0])); add(dl, el("dd", {}, r[1])); });
    document.getElementById("format").textContent = R.format + " version " + R.version;
    document.getElementById("title").textContent = (R.kind === "race" ? "A recorded race: " : "A recorded run: ") +
      M.name + ", " + when();
  }

  // ---------------------------------------------------------------------------------------------- sampling

  // The sampling chain of engine/core/sampling.py, in the same order: temperature -> top-k -> top-p -> min-p ->
  // softmax. ``order`` is the vocabulary sorted by logit, most likely first (a filter keeps a prefix of it).
  function samplingProbs(logits, order, T, k, p, m) {
    var V = logits.length, probs = new Float64Array(V), i;
    if (T <= 0) { probs[order[0]] = 1; return { probs: probs, kept: 1 }; }
    var keep = V;
    if (k > 0 && k < V) {
      var kth = logits[order[k - 1]];
      keep = k;
      while (keep < V && logits[order[keep]] >= kth) keep++;  // ties with the k-th survive, as in top_k_mask
    }
    var mx = logits[order[0]] / T, z = 0;
    for (i = 0; i < keep; i++) z += Math.exp(logits[order[i]] / T - mx);
    if (p < 1) {  // nucleus: keep a token while the mass of the strictly more likely ones is below p
      var above = 0, cut = keep;
      for (i = 0; i < keep; i++) {
        if (i > 0 && above >= p) { cut = i; break; }
        above += Math.exp(logits[order[i]] / T - mx) / z;
      }
      keep = cut;
    }
    if (m > 0) {  // min-p (Nguyen et al. 2024): p / p(most likely) = exp(logit / T - max), whatever the normalisation
      var cutM = 1;
      while (cutM < keep && Math.exp(logits[order[cutM]] / T - mx) >= m) cutM++;
      keep = cutM;
    }
    z = 0;
    for (i = 0; i < keep; i++) z += Math.exp(logits[order[i]] / T - mx);
    for (i = 0; i < keep; i++) probs[order[i]] = Math.exp(logits[order[i]] / T - mx) / z;
    return { probs: probs, kept: keep };
  }
  function draw(probs, order, kept) {
    var u = Math.random(), c = 0;
    for (var i = 0; i < kept; i++) { c += probs[order[i]]; if (u < c) return order[i]; }
    return order[kept - 1];
  }
  window.__replaySampling = samplingProbs;  // the browser test compares it with engine/core/sampling.py

  function samplingSection(t) {
    var s = section("6. Logits and sampling: the recorded logits, re-sampled in this page");
    add(s, el("p", {}, "The model's " + M.vocab_size.toLocaleString() + " logits for the first new token, as " +
      "recorded. Move the sliders: temperature divides the logits, top-k keeps the k most likely, top-p the " +
      "smallest set whose probability reaches p, min-p those at least min-p times as likely as the most likely, " +
      "then softmax. Nothing is recomputed by a model: the same recorded logits, re-sampled here. The run itself " +
      "used temperature " + t.settings.temperature + ", top-k " + t.settings.top_k + ", top-p " + t.settings.top_p +
      ", min-p " + t.settings.min_p + "."));
    var logits = array(t.first_logits.values);
    var order = Array.from(logits.keys()).sort(function (a, b) { return logits[b] - logits[a]; });
    var names = {};
    t.first_logits.top_ids.forEach(function (id, i) { names[id] = t.first_logits.top_tokens[i]; });
    function nameOf(id) { return id in names ? visible(names[id]) : "id " + id; }
    var ctl = add(s, el("div", { "class": "controls" }));
    function slider(id, text, min, max, step, value) {
      var l = add(ctl, el("label", {}, text));
      var inp = add(l, el("input", { type: "range", id: id, min: min, max: max, step: step, value: value }));
      var out = add(l, el("output", { id: id + "-value" }, value));
      return { input: inp, out: out };
    }
    var sT = slider("temperature", "Temperature", 0, 2, 0.05, t.settings.temperature);
    var sK = slider("top-k", "Top-k (0 = off)", 0, 200, 1, Math.min(200, t.settings.top_k));
    var sP = slider("top-p", "Top-p (1 = off)", 0.05, 1, 0.01, Math.max(0.05, t.settings.top_p));
    var sM = slider("min-p", "Min-p (0 = off)", 0, 1, 0.01, t.settings.min_p);
    var btn = add(ctl, el("button", { id: "draw-one", "class": "primary" }, "Draw a token"));
    function pct(x) { return x >= 0.001 ? (100 * x).toFixed(1) + "%" : (100 * x).toPrecision(2) + "%"; }
    var btnMany = add(ctl, el("button", { id: "draw-many" }, "Draw 1,000"));
    var drawn = add(s, el("p", { "class": "drawn", id: "drawn" }, ""));
    var SHOW = 15, top = order.slice(0, SHOW), counts = null;
    var base = samplingProbs(logits, order, 1, 0, 1).probs;
    var div = chart(s, "chart-sampling", [], {}, 620);
    var cap = caption(s, "model", "");
    var state = {};
    function redraw() {
      var T = Number(sT.input.value), k = Number(sK.input.value), p = Number(sP.input.value);
      var m = Number(sM.input.value);
      sT.out.textContent = T.toFixed(2); sK.out.textContent = k; sP.out.textContent = p.toFixed(2);
      sM.out.textContent = m.toFixed(2);
      state = samplingProbs(logits, order, T, k, p, m);
      var labels = top.map(function (id, i) { return (i + 1) + ". " + esc(nameOf(id)); }).reverse();
      var traces = [
        { type: "bar", orientation: "h", name: "softmax at temperature 1", y: labels, marker: { color: COLORS.muted },
          x: top.map(function (id) { return base[id]; }).reverse() },
        { type: "bar", orientation: "h", name: "after your settings (what a draw uses)", y: labels,
          marker: { color: COLORS.primary }, x: top.map(function (id) { return state.probs[id]; }).reverse(),
          text: top.map(function (id) { return state.probs[id] > 0 ? (100 * state.probs[id]).toFixed(1) + "%" : "removed"; }).reverse(),
          textposition: "outside", textfont: { size: 14, color: INK }, cliponaxis: false },
      ];
      if (counts) traces.push({ type: "bar", orientation: "h", name: "share of 1,000 draws", y: labels,
        marker: { color: COLORS.warn }, x: top.map(function (id) { return (counts[id] || 0) / 1000; }).reverse() });
      var most = 0;
      traces.forEach(function (tr) { tr.x.forEach(function (v) { most = Math.max(most, v); }); });
      Plotly.react(div, traces, Object.assign(div.layout, {
        title: title("The 15 most likely first tokens, before and after your sampling settings"),
        barmode: "group", bargap: 0.25, xaxis: axis("probability (0 to 1)", { range: [0, Math.min(1, most) * 1.18 + 0.01],
          tickfont: { size: 15, color: INK } }),
        yaxis: axis("", { tickfont: { size: 15, color: INK }, dtick: 1 }), margin: { l: 170, r: 30, t: 100, b: 70 },
      }));
      cap.lastChild.textContent = "The recorded logits (" + M.precision + ", " + M.name + "); the filters run in " +
        "this page's JavaScript, in the engine's order. " + state.kept.toLocaleString() + " of " +
        M.vocab_size.toLocaleString() + " tokens can be drawn with these settings. Draws use the browser's random " +
        "numbers, not the recorded seed.";
    }
    [sT, sK, sP, sM].forEach(function (sl) { sl.input.addEventListener("input", function () { counts = null; redraw(); }); });
    btn.addEventListener("click", function () {
      var id = draw(state.probs, order, state.kept);
      drawn.textContent = "Drawn: " + (id in names ? nameOf(id) + " (id " + id + ", " : "id " + id +
        " (outside the " + t.first_logits.top_ids.length + " most likely, whose text the record keeps; ") +
        "probability " + pct(state.probs[id]) + ")";
    });
    btnMany.addEventListener("click", function () {
      counts = {};
      for (var i = 0; i < 1000; i++) { var id = draw(state.probs, order, state.kept); counts[id] = (counts[id] || 0) + 1; }
      redraw();
    });
    redraw();
  }

  // ---------------------------------------------------------------------------------------------- a trace

  function traceSections(t) {
    var n = t.prompt.ids.length, a = t.analysis;
    var s = section("1. Text: what the model receives");
    add(s, el("p", {}, "The prompt as typed:"));
    add(s, el("pre", { "class": "text", id: "prompt-text" }, t.prompt.text));
    add(s, el("p", {}, t.prompt.chat_template_applied ?
      "The chat template wrapped it in role markers; this is the exact text the model read:" :
      "This is the exact text the model read:"));
    add(s, el("pre", { "class": "text" }, t.prompt.input_text));
    t.prompt.notes.forEach(function (note) { add(s, el("p", { "class": "warn" }, note)); });

    s = section("2. Token ids: " + n + " tokens");
    chips(s, t.prompt.tokens, t.prompt.ids);

    if (a) {
      s = section("3. Embedding rows: each id becomes a vector");
      var emb = array(a.embedding_preview);
      var w = a.embedding_preview.shape[1], norms = array(a.residual_norms);
      var z = [], ylab = [];
      for (var i = 0; i < n; i++) { z.push(Array.from(emb.slice(i * w, (i + 1) * w))); ylab.push(i + ": " + label(t.prompt.tokens[i])); }
      chart(s, "chart-embeddings", [{ type: "heatmap", z: z, y: ylab, x: Array.from({ length: w }, function (_, j) { return "dim " + j; }),
        colorscale: RDBU, zmid: 0, colorbar: { title: { text: "value" } },
        customdata: Array.from({ length: n }, function (_, i) { return Array(w).fill(norms[i]); }),
        hovertemplate: "%{y}, %{x}: %{z:.4f}<br>L2 norm of the row %{customdata:.3f}<extra></extra>" }],
        { title: title("The first " + w + " of " + M.hidden_size + " values of each token's embedding row"),
          xaxis: axis("dimension of the embedding vector"), yaxis: axis("position: token", { autorange: "reversed" }),
          margin: { l: 170, r: 20, t: 80, b: 60 } }, Math.max(320, 22 * n + 140));
      var pos = { rope: "position is not in these rows: this model rotates queries and keys by position (RoPE) " +
                        "inside attention", learned: "each row includes its position's learned vector",
                  alibi: "position is not in these rows: this model (ALiBi) lowers each attention score by distance" };
      caption(s, "model", "Block 0's input as the model built it; " + (pos[M.position_encoding] ||
        "this model adds no position vector") + ". Hover for the whole row's L2 norm.");

      attentionSection(a, t.prompt.tokens);
      lensSection(a);
    }
    samplingSection(t);

    s = section("7. Each new token, one pass at a time");
    chips(s, t.generated_tokens, t.generated_ids, function (i) { return i === 0; });
    add(s, el("p", {}, "Generated text: "));
    add(s, el("pre", { "class": "text", id: "generated-text" }, t.generated_text));
    table(s, ["step", "phase", "tokens in", "chosen", "p(chosen)", "top alternatives", "ms", "KV cache (KiB)"],
      t.steps.map(function (st) {
        return [st.index, st.phase, st.tokens_in, visible(st.token), fmt(st.prob, 3),
          st.top_tokens.slice(0, 3).map(function (x, j) { return visible(x) + " " + fmt(st.top_probs[j], 2); }).join(", "),
          fmt(1000 * st.seconds, 1), fmt(st.kv_bytes / 1024, 1)];
      }), [1, 0, 1, 0, 1, 0, 1, 1]);
    caption(s, "measured", "Each forward pass's wall time includes sampling, after a device sync" +
      (t.timed_in_batcher ? "; these steps were timed in a class batch with other requests (see 'tokens in')." : "."));

    timelineSection(t);
    kvSection(t);
  }

  function attentionSection(a, tokens) {
    var s = section("4. Attention: every layer and head");
    var shape = a.attentions.shape, L = shape[0], H = shape[1], m = shape[2];
    if (!L) { add(s, el("p", {}, "This architecture's attention weights were not recorded.")); return; }
    var W = array(a.attentions);
    add(s, el("p", {}, "Row: the query position; column: the key it looks at. Each row sums to 1; grey cells are " +
      "masked (a token never sees a later one)." + (m < tokens.length ? " The first " + m + " positions were kept." : "")));
    var ctl = add(s, el("div", { "class": "controls" }));
    function pick(id, text, count) {
      var l = add(ctl, el("label", {}, text)), sel = add(l, el("select", { id: id }));
      for (var i = 0; i < count; i++) add(sel, el("option", { value: i }, i));
      return sel;
    }
    var layer = pick("layer", "Layer", L), head = pick("head", "Head", H);
    var names = tokens.slice(0, m).map(function (tk, i) { return i + ": " + label(tk); });
    var div = chart(s, "chart-attention", [], {}, Math.max(420, Math.min(900, 14 * m + 160)));
    function redraw() {
      var l = Number(layer.value), h = Number(head.value), off = ((l * H) + h) * m * m, z = [];
      for (var q = 0; q < m; q++) {
        var row = [];
        for (var k = 0; k < m; k++) row.push(k > q ? null : W[off + q * m + k]);
        z.push(row);
      }
      var kind = (M.arch && M.arch.layer_kinds) ? " (" + M.arch.layer_kinds[l] + (M.arch.windows[l] ? ", window " + M.arch.windows[l] : "") + ")" : "";
      Plotly.react(div, [{ type: "heatmap", z: z, x: names, y: names, colorscale: BLUES, zmin: 0, zmax: 1,
        colorbar: { title: { text: "weight" } }, hoverongaps: false,
        hovertemplate: "query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>" }],
        Object.assign(div.layout, { title: title("Attention weights, layer " + l + kind + ", head " + h),
          xaxis: axis("key position: token", { tickfont: { size: 14, color: INK } }),
          yaxis: axis("query position: token", { autorange: "reversed", tickfont: { size: 14, color: INK } }),
          plot_bgcolor: "#c9ced6", margin: { l: 150, r: 20, t: 80, b: 130 } }));
    }
    layer.addEventListener("change", redraw);
    head.addEventListener("change", redraw);
    redraw();
    caption(s, "model", "Recorded in float16 from one untimed pass over the prompt, " + L + " layers x " + H + " heads.");
  }

  function lensSection(a) {
    var s = section("5. Logit lens: the prediction forming, layer by layer");
    var lens = a.lens;
    if (!lens.ids.length) { add(s, el("p", {}, "The logit lens was not recorded for this architecture.")); return; }
    var rows = lens.ids.length, cols = lens.ids[0].length;
    var ylab = Array.from({ length: rows }, function (_, i) { return i === 0 ? "embedding" : i === rows - 1 ? "block " + (i - 1) + " (output)" : "block " + (i - 1); });
    var xlab = Array.from({ length: cols }, function (_, j) { return "rank " + (j + 1); });
    chart(s, "chart-lens", [{ type: "heatmap", z: lens.probs, x: xlab, y: ylab, colorscale: "Viridis", zmin: 0, zmax: 1,
      text: lens.tokens.map(function (r) { return r.map(function (x) { return label(x, 10); }); }), texttemplate: "%{text}",
      textfont: { size: 13 }, colorbar: { title: { text: "probability" } },
      hovertemplate: "%{y}, %{x}: %{text} %{z:.3f}<extra></extra>" }],
      { title: title("The top 5 next tokens at the last prompt position, read after each block"),
        xaxis: axis("rank of the token at that depth"), yaxis: axis("read after", { autorange: "reversed" }),
        margin: { l: 170, r: 20, t: 80, b: 60 } }, Math.max(380, 20 * rows + 140));
    caption(s, "model", "Each block's residual stream put through the final norm and the output head; the last row " +
      "is the model's real output.");
  }

  function timelineSection(t) {
    var s = section("8. Prefill vs decode: the run's timeline, to scale");
    var start = 0, bars = t.steps.map(function (st) { var b = { st: st, start: start }; start += 1000 * st.seconds; return b; });
    var traces = [["prefill", "prefill pass", COLORS.warn], ["decode", "decode passes", COLORS.primary]].map(function (p) {
      var bs = bars.filter(function (b) { return b.st.phase === p[0]; });
      return { type: "bar", orientation: "h", name: p[0], y: bs.map(function () { return p[1]; }),
        x: bs.map(function (b) { return 1000 * b.st.seconds; }), base: bs.map(function (b) { return b.start; }),
        marker: { color: p[2], line: { color: "white", width: p[0] === "decode" ? 1.5 : 0 } },
        customdata: bs.map(function (b) { return [b.st.index, b.st.tokens_in, esc(visible(b.st.token))]; }),
        hovertemplate: "step %{customdata[0]}: %{customdata[1]} token(s) in, %{x:.1f} ms<br>chose '%{customdata[2]}'<extra></extra>" };
    });
    var tm = t.timings, dec = tm.decode_seconds;
    chart(s, "chart-timeline", traces, {
      title: title("Timeline of this run: 1 prefill pass, then " + (t.steps.length - 1) + " decode passes (to scale)"),
      xaxis: axis("time since the prompt was submitted (ms)", { range: [0, Math.max(1, start) * 1.02] }),
      yaxis: axis("", { categoryorder: "array", categoryarray: ["decode passes", "prefill pass"] }),
      barmode: "overlay", showlegend: false, bargap: 0.35, margin: { l: 130, r: 20, t: 80, b: 70 } }, 300);
    caption(s, "measured", "Time to first token " + fmt(1000 * tm.prefill_seconds, 0) + " ms; decode steps: median " +
      fmt(1000 * dec.median, 1) + " ms (range " + fmt(1000 * dec.lo, 1) + " to " + fmt(1000 * dec.hi, 1) + " ms, " +
      "quartiles " + fmt(1000 * dec.q1, 1) + " to " + fmt(1000 * dec.q3, 1) + ", n = " + dec.n + "); " +
      fmt(tm.tokens_per_second, 1) + " tokens/s over the whole run.");
  }

  function kvSection(t) {
    var s = section("9. KV cache: how it grows");
    var xs = t.steps.map(function (st) { return st.kv_tokens; });
    chart(s, "chart-kv", [
      { type: "scatter", mode: "lines", name: "per-layer formula (derived)", x: xs,
        y: t.kv_formula_bytes.map(function (b) { return b / 1024; }), line: { color: COLORS.accent, width: 6 }, opacity: 0.45 },
      { type: "scatter", mode: "markers", name: "measured from the cache tensors", x: xs,
        y: t.steps.map(function (st) { return st.kv_bytes / 1024; }), marker: { color: COLORS.primary, size: 9 },
        hovertemplate: "%{x} tokens cached: %{y:,.1f} KiB<extra></extra>" },
    ], { title: title("KV cache size after each step"), xaxis: axis("tokens in the cache"),
         yaxis: axis("cache size (KiB)") }, 380);
    caption(s, "measured", "Bytes of the cache's key and value tensors after each step, beside the formula " +
      "2 x KV heads x head dim x tokens held x bytes per value, summed over layers (derived from the architecture).");
  }

  // ---------------------------------------------------------------------------------------------- a race

  function raceSchedule(r) {  // as ui/speculative/race.schedule: when each piece of each lane appears (s)
    var plainT = [], t = 0;
    r.plain.step_seconds.forEach(function (x) { t += x; plainT.push(t); });
    var pieces = [[r.speculative.tokens[0], "prefill"]], specT = [r.speculative.prefill_seconds];
    t = r.speculative.prefill_seconds;
    var kept = 1;
    r.speculative.rounds.forEach(function (rnd) {
      t += rnd.draft_seconds + rnd.verify_seconds;
      var roles = [], words = rnd.drafted_tokens.concat([rnd.token_text]);
      for (var i = 0; i < rnd.drafted.length; i++) roles.push(i < rnd.accepted ? "accepted" : "rejected");
      roles.push(rnd.kind);
      words.forEach(function (w, i) {
        if (roles[i] === "rejected") { pieces.push([w, "rejected"]); specT.push(t); }
        else if (kept < r.speculative.ids.length) { pieces.push([r.speculative.tokens[kept], roles[i]]); specT.push(t); kept++; }
      });
    });
    return { plainT: plainT, specT: specT, pieces: pieces };
  }

  function raceSections(r) {
    var s = section("1. The prompt and its tokens");
    add(s, el("pre", { "class": "text", id: "prompt-text" }, r.prompt.text));
    chips(s, r.prompt.tokens, r.prompt.ids);
    s = section("2. The race: plain decoding against " + r.drafter + ", k = " + r.k);
    var legend = add(s, el("p", { "class": "legend" }));
    [["accepted", "drafted and accepted"], ["rejected", "drafted and rejected"], ["correction", "the target's correction"],
     ["bonus", "bonus token"]].forEach(function (x) { add(legend, el("span", { "class": "r-" + x[0] }, x[1])); });
    var ctl = add(s, el("div", { "class": "controls" }));
    var play = add(ctl, el("button", { id: "race-play", "class": "primary" }, "Replay the race"));
    var note = add(ctl, el("span", { id: "race-note" }, ""));
    var lanes = add(s, el("div", { "class": "lanes" }));
    function lane(name) {
      var col = add(lanes, el("div", {}));
      add(col, el("h3", {}, name));
      return { clock: add(col, el("div", { "class": "clock" })), box: add(col, el("div", { "class": "lane" })) };
    }
    var pl = lane("Plain decoding"), sp = lane("Speculative: " + r.drafter + ", k = " + r.k);
    var sch = raceSchedule(r);
    var plainPieces = r.plain.tokens.map(function (x, i) { return [x, i === 0 ? "prefill" : "plain"]; });
    function paint(box, pieces, n) {
      box.textContent = "";
      pieces.slice(0, n).forEach(function (p) { add(box, el("span", { "class": "r-" + p[1], title: p[1] }, p[0].replace(/\n/g, "\u21b5\n"))); });
    }
    function clock(c, sec, tokens) { c.textContent = "clock " + sec.toFixed(2) + " s   " + tokens + " tokens   " + (sec > 0 ? (tokens / sec).toFixed(1) : "0.0") + " tokens/s"; }
    function count(times, now) { var n = 0; while (n < times.length && times[n] <= now) n++; return n; }
    // each lane's clock stops at its own end (its last token); the replay lasts until the later one
    var plainEnd = sch.plainT[sch.plainT.length - 1] || 0, specEnd = sch.specT[sch.specT.length - 1] || 0;
    var end = Math.max(plainEnd, specEnd);
    var factor = Math.max(1, end / 12);
    function frame(now) {
      var np = count(sch.plainT, now), ns = count(sch.specT, now);
      paint(pl.box, plainPieces, np); paint(sp.box, sch.pieces, ns);
      clock(pl.clock, Math.min(now, plainEnd), np);
      clock(sp.clock, Math.min(now, specEnd), sch.pieces.slice(0, ns).filter(function (p) { return p[1] !== "rejected"; }).length);
    }
    var raf = null;
    play.addEventListener("click", function () {
      if (raf) cancelAnimationFrame(raf);
      var t0 = performance.now();
      play.setAttribute("data-state", "playing");
      (function tick() {
        var now = (performance.now() - t0) / 1000 * factor;
        frame(Math.min(now, end));
        if (now < end) raf = requestAnimationFrame(tick); else { raf = null; play.setAttribute("data-state", "done"); }
      })();
    });
    note.textContent = factor > 1 ? "replayed " + factor.toFixed(1) + "x faster than measured (both lanes alike)" :
      "replayed at the measured pace";
    frame(end);
    caption(s, "measured", "Both lanes ran on the engine with nothing drawn, then this page replays them on their " +
      "measured clocks: each plain token when its pass ended, each speculative round's tokens when its verify pass ended.");

    var sm = r.summary;
    s = section("3. Who won, and why");
    table(s, ["", "value", "what it is"], [
      ["Measured speedup (wall clock)", wallSpeedup(r.check.shown, sm.speedup), "speculative tokens/s over plain tokens/s, prefill included: the median of the races measured (\"no gain\" within noise)"],
      ["Decode-only speedup", fmt(sm.decode_speedup, 2) + "x", "each lane's time after its first token"],
      ["Acceptance rate a", fmt(100 * sm.acceptance_rate, 0) + "%", "accepted drafts / drafts the target judged"],
      ["Tokens per target pass", fmt(sm.tokens_per_pass, 2), "plain decoding: exactly 1"],
      ["Cost ratio c", fmt(sm.c, 3), "draft seconds per drafted token / median plain decode step"],
      ["Paper's formula (derived)", fmt(sm.expected_speedup, 2) + "x", "(1 - a^(k+1)) / ((1 - a)(k c + 1)), Leviathan et al. 2023"],
      ["Formula with the measured verify cost (derived)", fmt(sm.expected_speedup_as_run, 2) + "x", "round by round, each verify pass as measured"],
      ["Identical output", sm.identical ? "yes" : "no", "token for token; must be yes at temperature 0"],
    ], [0, 1, 0]);
    r.check.flags.forEach(function (f) { add(s, el("p", { "class": "warn" }, f)); });
    caption(s, "measured", "Times measured in one run on the recorded machine; the formula lines are derived from them.");

    var pt = [], t = 0;
    r.plain.step_seconds.forEach(function (x) { t += x; pt.push(1000 * t); });
    var stt = [1000 * r.speculative.prefill_seconds], toks = [1];
    t = r.speculative.prefill_seconds;
    var got = 1;
    r.speculative.rounds.forEach(function (rnd) { t += rnd.draft_seconds + rnd.verify_seconds; got += rnd.accepted + 1; stt.push(1000 * t); toks.push(Math.min(got, r.speculative.ids.length)); });
    chart(s, "chart-race-progress", [
      { type: "scatter", mode: "lines+markers", name: "plain", x: pt, y: pt.map(function (_, i) { return i + 1; }), line: { color: COLORS.muted } },
      { type: "scatter", mode: "lines+markers", name: "speculative", x: stt, y: toks, line: { color: COLORS.good } },
    ], { title: title("Tokens written against time, both lanes"), xaxis: axis("time since the prompt (ms)"),
         yaxis: axis("tokens written") }, 380);
    caption(s, "measured", "Each point is one forward pass of the target (speculative: one round, draft + verify).");

    var idx = r.speculative.rounds.map(function (x) { return x.index + 1; });
    chart(s, "chart-race-rounds", [
      { type: "bar", name: "accepted drafts", x: idx, y: r.speculative.rounds.map(function (x) { return x.accepted; }), marker: { color: "#22c55e" } },
      { type: "bar", name: "rejected drafts", x: idx, y: r.speculative.rounds.map(function (x) { return -(x.drafted.length - x.accepted); }), marker: { color: "#ef4444" } },
      { type: "bar", name: "the target's own token", x: idx, y: r.speculative.rounds.map(function () { return 1; }),
        marker: { color: r.speculative.rounds.map(function (x) { return { correction: "#eab308", bonus: "#3b82f6" }[x.kind] || COLORS.muted; }) } },
    ], { title: title("Every round: accepted and rejected drafts, then the target's token"), barmode: "relative",
         xaxis: axis("round"), yaxis: axis("tokens (rejected below 0)") }, 360);
    caption(s, "model", "What the target decided in each round of this run.");

    chart(s, "chart-race-times", [
      { type: "bar", name: "draft", x: idx, y: r.speculative.rounds.map(function (x) { return 1000 * x.draft_seconds; }), marker: { color: "#a855f7" } },
      { type: "bar", name: "verify pass", x: idx, y: r.speculative.rounds.map(function (x) { return 1000 * x.verify_seconds; }), marker: { color: COLORS.primary } },
    ], { title: title("Draft and verify time per round"), barmode: "stack", xaxis: axis("round"), yaxis: axis("wall time (ms)"),
         shapes: isFinite(sm.plain_seconds) && r.plain.step_seconds.length > 1 ? [{ type: "line", xref: "paper", x0: 0, x1: 1,
           y0: 1000 * median(r.plain.step_seconds.slice(1)), y1: 1000 * median(r.plain.step_seconds.slice(1)), line: { dash: "dash", color: INK } }] : [] }, 360);
    caption(s, "measured", "The dashed line is the median plain decode step.");
  }
  function median(xs) { var v = xs.slice().sort(function (a, b) { return a - b; }), n = v.length; return n ? (n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) : NaN; }

  provenance();
  if (R.kind === "race") raceSections(R.race); else traceSections(R.trace);
  document.body.setAttribute("data-ready", "1");
})();
