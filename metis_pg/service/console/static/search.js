// The Search page: one question of one or several bases; compare by meaning, by words, both.
// The search lives in the URL's fragment (#q=...&base=...): open it and the same search runs;
// back and forward move between searches. The fragment never reaches the server's logs.
"use strict";

(() => {
  const {$, el, api, start, showError, clearError, statusLabel, location: where, scoresLine} = Metis;
  const DEFAULT_TOP_K = 10;
  let bases = [];
  let sequence = 0;  // answers of older searches are dropped

  function readHash() {
    const p = new URLSearchParams(window.location.hash.slice(1));
    const topK = parseInt(p.get("top_k"), 10);
    return {
      q: p.get("q") || "",
      bases: p.getAll("base"),
      mode: p.get("mode") || "hybrid",
      top_k: Number.isFinite(topK) ? topK : DEFAULT_TOP_K,
      rerank: p.get("rerank") !== "0",
      prefix: p.get("prefix") || "",
      kinds: p.getAll("kind"),
      sources: p.getAll("source"),
      tags: p.getAll("tag"),
      exclude_tags: p.getAll("exclude_tag"),
      authors: p.getAll("author"),
      since: p.get("since") || "",
      until: p.get("until") || "",
      compare: p.get("compare") === "1",
      per_document: p.get("per_document") === "1",
    };
  }

  function toHash(s) {
    const p = new URLSearchParams();
    p.set("q", s.q);
    s.bases.forEach((b) => p.append("base", b));
    if (s.mode !== "hybrid") p.set("mode", s.mode);
    if (s.top_k !== DEFAULT_TOP_K) p.set("top_k", String(s.top_k));
    if (!s.rerank) p.set("rerank", "0");
    if (s.prefix) p.set("prefix", s.prefix);
    s.kinds.forEach((k) => p.append("kind", k));
    s.sources.forEach((k) => p.append("source", k));
    s.tags.forEach((k) => p.append("tag", k));
    s.exclude_tags.forEach((k) => p.append("exclude_tag", k));
    s.authors.forEach((k) => p.append("author", k));
    if (s.since) p.set("since", s.since);
    if (s.until) p.set("until", s.until);
    if (s.compare) p.set("compare", "1");
    if (s.per_document) p.set("per_document", "1");
    return "#" + p.toString();
  }

  function checked(name) {
    return Array.from(document.querySelectorAll("input[name='" + name + "']:checked")).map((i) => i.value);
  }

  function listed(id) {
    return $(id).value.split(",").map((s) => s.trim()).filter(Boolean);
  }

  function readForm() {
    const mode = document.querySelector("input[name='mode']:checked");
    return {
      q: $("q").value.trim(),
      bases: checked("base"),
      mode: mode ? mode.value : "hybrid",
      top_k: Number($("top_k").value),
      rerank: $("rerank").disabled ? $("rerank").dataset.wanted !== "0" : $("rerank").checked,
      prefix: $("prefix").value.trim(),
      kinds: checked("kind"),
      sources: listed("sources"),
      tags: listed("tags"),
      exclude_tags: listed("exclude_tags"),
      authors: listed("authors"),
      since: $("since").value,
      until: $("until").value,
      compare: $("compare").checked,
      per_document: $("per_document").checked,
    };
  }

  function fillForm(s) {
    $("q").value = s.q;
    document.querySelectorAll("input[name='base']").forEach((i) => { i.checked = s.bases.includes(i.value); });
    document.querySelectorAll("input[name='mode']").forEach((i) => { i.checked = i.value === s.mode; });
    $("top_k").value = String(s.top_k);
    $("rerank").checked = s.rerank;
    $("rerank").dataset.wanted = s.rerank ? "1" : "0";
    $("prefix").value = s.prefix;
    document.querySelectorAll("input[name='kind']").forEach((i) => { i.checked = s.kinds.includes(i.value); });
    $("sources").value = s.sources.join(", ");
    $("tags").value = s.tags.join(", ");
    $("exclude_tags").value = s.exclude_tags.join(", ");
    $("authors").value = s.authors.join(", ");
    $("since").value = s.since;
    $("until").value = s.until;
    $("compare").checked = s.compare;
    $("per_document").checked = s.per_document;
    syncMode();
  }

  function syncMode() {
    // Compare asks all three ways: the mode does not apply.
    document.querySelectorAll("input[name='mode']").forEach((i) => { i.disabled = $("compare").checked; });
    $("per_document").disabled = $("compare").checked;
    syncRerank();
  }

  /** Rerank only when a ticked base has a reranker: else the box is off, disabled, and says so. */
  function syncRerank() {
    const ticked = new Set(checked("base"));
    const chosen = bases.filter((b) => ticked.has(b.name));
    const any = !chosen.length || chosen.some((b) => b.spec && b.spec.reranker_model);
    const box = $("rerank");
    box.disabled = !any;
    if (!any) box.checked = false;
    else if (box.dataset.wanted !== undefined) box.checked = box.dataset.wanted === "1";
    $("rerank-label").textContent = any ? "rerank" : "no reranker";
  }

  function renderBases() {
    const list = $("base-list");
    list.replaceChildren();
    if (!bases.length) {
      list.append(el("span", {class: "muted"}, "No base yet: index one on the ", el("a", {href: "/console/bases"}, "Bases page"), "."));
      return;
    }
    for (const b of bases) {
      list.append(el("label", {class: "choice"},
        el("input", {type: "checkbox", name: "base", value: b.name}), " " + b.name + " ",
        el("span", {class: "status status-" + b.status}, statusLabel(b.status))));
    }
  }

  function problem(s) {
    if (!s.q) return ["q", "Type a question first."];
    if (!s.bases.length) return [bases.length ? "bases-field" : "q", bases.length ? "Tick at least one base to search." : "There is no base to search yet: index one on the Bases page."];
    const max = Number($("top_k").max);
    if (!Number.isInteger(s.top_k) || s.top_k < 1 || s.top_k > max) return ["top_k", "Results must be a whole number from 1 to " + max + "."];
    return null;
  }

  function clearAnswer() {
    $("notices").replaceChildren();
    $("results").replaceChildren();
    $("compare-table").tBodies[0].replaceChildren();
    $("compare-wrap").hidden = true;
    $("took").hidden = true;
    $("summary").hidden = true;
  }

  function applyState(s) {
    fillForm(s);
    clearError();
    if (s.q) run(s);
    else clearAnswer();
  }

  async function run(s) {
    const wrong = problem(s);
    if (wrong) {
      showError(wrong[1]);
      const target = $(wrong[0]);
      (target.querySelector ? (target.querySelector("input") || target) : target).focus();
      return;
    }
    clearError();
    const mine = ++sequence;
    const answerBox = $("answer");
    answerBox.setAttribute("aria-busy", "true");
    const body = {bases: s.bases, question: s.q, top_k: s.top_k};
    if (!s.rerank) body.rerank = false;
    if (s.per_document && !s.compare) body.per_document = true;
    const filters = {};
    if (s.prefix) filters.path_prefix = s.prefix;
    if (s.kinds.length) filters.kinds = s.kinds;
    if (s.sources.length) filters.sources = s.sources;
    if (s.tags.length) filters.tags_any = s.tags;
    if (s.exclude_tags.length) filters.exclude_tags = s.exclude_tags;
    if (s.authors.length) filters.authors = s.authors;
    if (s.since) filters.since = s.since;
    if (s.until) filters.until = s.until;
    if (Object.keys(filters).length) body.filters = filters;
    if (!s.compare) body.mode = s.mode;
    try {
      const answer = await api("POST", s.compare ? "/compare" : "/search", body);
      if (mine !== sequence) return;
      clearAnswer();
      if (s.compare) renderCompare(answer, s);
      else renderSearch(answer, s);
    } catch (e) {
      if (mine !== sequence) return;
      clearAnswer();
      if (e.status !== 401) showError(e.message);
    } finally {
      if (mine === sequence) {
        answerBox.setAttribute("aria-busy", "false");
        answerBox.dataset.answered = String(mine);  // which search the answer shown is (tests wait on it)
      }
    }
  }

  function renderNotices(warnings) {
    const box = $("notices");
    for (const w of warnings) {
      box.append(el("p", {class: "notice", role: "status", "data-code": w.code},
        el("strong", {}, "Warning: "), Metis.sentence(w.message)));
    }
  }

  function renderTook(took, labels) {
    const parts = labels.filter(([key]) => key in took).map(([key, label]) => label + " " + took[key].toFixed(1) + " ms");
    const p = $("took");
    p.textContent = parts.join(" · ");
    p.hidden = false;
  }

  /** The snippet with the words that weigh marked: the server's spans (citation.marks, [start, end) in code
   * points: only the question's words that weigh in the base, by idf), text nodes only (nothing parsed as HTML). */
  function marked(text, marks) {
    const chars = Array.from(text);
    const out = [];
    let at = 0;
    for (const [start, end] of marks || []) {
      if (start < at || end > chars.length) continue;
      if (start > at) out.push(chars.slice(at, start).join(""));
      out.push(el("mark", {}, chars.slice(start, end).join("")));
      at = end;
    }
    if (at < chars.length) out.push(chars.slice(at).join(""));
    return out;
  }

  /** The document's date, author and tags (absent when it has none). */
  function about(c) {
    const parts = [];
    if (c.date) parts.push(c.date.slice(0, 10));
    if (c.author) parts.push("by " + c.author);
    const tags = (c.tags || []).map((t) => el("span", {class: "tag"}, "#" + t));
    if (!parts.length && !tags.length) return null;
    return el("div", {class: "about muted"}, parts.join(" · ") + (parts.length && tags.length ? " · " : ""), ...tags);
  }

  function renderSearch(answer, s) {
    renderNotices(answer.warnings);
    renderTook(answer.took, [["embed", "embed"], ["dense", "meaning"], ["keyword", "words"], ["fuse", "fuse"],
                             ["rerank", "rerank"], ["total", "total"]]);
    const modeName = {hybrid: "hybrid", dense: "by meaning only", keyword: "by words only"}[answer.mode] || answer.mode;
    const summary = $("summary");
    const unit = answer.per_document ? " document" : " result";
    summary.textContent = (answer.results.length === 1 ? "1" + unit : answer.results.length + unit + "s") +
      " · " + modeName + (answer.reranked ? " · reranked" : "") + " · " + answer.bases.join(", ");
    summary.hidden = false;
    const list = $("results");
    answer.results.forEach((r, i) => {
      const c = r.citation;
      const head = el("div", {class: "result-head"},
        el("span", {class: "rank", "aria-label": "rank " + (i + 1)}, String(i + 1)),
        el("span", {class: "cite"}, where(c)),
        el("span", {class: "base", title: "base"}, r.base),
        r.holds === false ? el("span", {class: "status status-waiting"}, "no longer holds") : null,
        r.passages ? el("span", {class: "passages"}, r.passages === 1 ? "1 passage" : r.passages + " passages") : null);
      // The heading path of an HTML page (or a document with one title heading) starts with its title: said once.
      const headings = c.headings[0] === c.title ? c.headings.slice(1) : c.headings;
      const item = el("li", {class: "result", "data-chunk": r.chunk_id},
        head,
        el("div", {class: "title"}, c.title),
        headings.length ? el("div", {class: "headings"}, headings.join(" › ")) : null,
        about(c),
        el("p", {class: "snippet"}, marked(c.snippet, c.marks)),
        el("p", {class: "scores"}, scoresLine(r.scores)),
        el("details", {class: "whole"}, el("summary", {}, "Whole passage"), el("pre", {class: "text"}, r.text)));
      list.append(item);
    });
    if (!answer.results.length && !answer.warnings.length) {
      $("notices").append(el("p", {class: "notice", role: "status"}, "No passage matched the question."));
    }
  }

  function rankCell(rank, label) {
    return el("td", {class: "rank-cell", "data-label": label}, rank === null || rank === undefined ? "—" : "#" + rank);
  }

  function renderCompare(answer, s) {
    renderNotices(answer.warnings);
    renderTook(answer.took, [["embed", "embed"], ["search", "search"], ["rerank", "rerank"], ["total", "total"]]);
    const counts = answer.counts;
    const summary = $("summary");
    summary.textContent = answer.passages.length + " passages · both " + counts.hybrid + " · meaning " + counts.dense +
      " · words " + counts.keyword + (answer.reranked ? " · reranked" : "") + " · " + answer.bases.join(", ");
    summary.hidden = false;
    const body = $("compare-table").tBodies[0];
    for (const p of answer.passages) {
      body.append(el("tr", {class: "agree-" + p.agreement, "data-chunk": p.chunk_id},
        el("th", {scope: "row"}, el("span", {class: "cite"}, where(p.citation)),
          el("span", {class: "title"}, p.citation.title), el("span", {class: "base"}, p.base),
          el("span", {class: "snippet"}, marked(p.citation.snippet, p.citation.marks))),
        rankCell(p.ranks.hybrid, "Both"), rankCell(p.ranks.dense, "Meaning"), rankCell(p.ranks.keyword, "Words"),
        el("td", {class: "why", "data-label": "Why it came up:"}, p.why)));
    }
    $("compare-wrap").hidden = false;
    if (!answer.passages.length && !answer.warnings.length) {
      $("notices").append(el("p", {class: "notice", role: "status"}, "No passage matched the question."));
    }
  }

  function onSubmit(event) {
    event.preventDefault();
    const s = readForm();
    if (problem(s)) {
      run(s);  // shows the problem
      return;
    }
    const hash = toHash(s);
    if (window.location.hash !== hash) history.pushState(null, "", hash);
    run(s);
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("search-form").addEventListener("submit", onSubmit);
    $("compare").addEventListener("change", syncMode);
    $("base-list").addEventListener("change", syncRerank);
    $("rerank").addEventListener("change", () => { $("rerank").dataset.wanted = $("rerank").checked ? "1" : "0"; });
    window.addEventListener("popstate", () => applyState(readHash()));
    start(async (list) => {
      bases = list;
      renderBases();
      const s = readHash();
      if (!s.bases.length && bases.length === 1) s.bases = [bases[0].name];
      applyState(s);
      if (!s.q) $("q").focus();
    });
  });
})();
