// The Bases page: every base with its status and counts, indexing jobs watched live, notes.
"use strict";

(() => {
  const {$, el, api, start, showError, clearError, statusLabel, when} = Metis;
  let bases = [];
  let refreshTimer = null;
  const path = (name) => "/bases/" + encodeURIComponent(name);

  function models(spec) {
    const parts = [spec.embedding_model + (spec.embedding_dim ? " (" + spec.embedding_dim + ")" : "")];
    if (spec.reranker_model) parts.push("reranker " + spec.reranker_model);
    return parts.join(" · ");
  }

  // Why chunks have no vector (issue 26): "3 (1 refused by the model, 2 model down)", and the
  // vectors made from a cut text.
  function withoutVectors(b) {
    const r = b.without_vector_by_reason || {};
    const parts = [];
    if (r.refused) parts.push(r.refused + " refused by the model");
    if (r.model_unavailable) parts.push(r.model_unavailable + " model down");
    if (r.not_embedded_yet && parts.length) parts.push(r.not_embedded_yet + " not embedded yet");
    return [String(b.chunks_without_vector),
      parts.length ? el("span", {class: "muted reasons"}, " (" + parts.join(", ") + ")") : null,
      b.chunks_cut ? el("span", {class: "muted cut", title: "embedded from their text cut to METIS_EMBED_MAX_CHARS"},
        " · " + b.chunks_cut + " cut") : null];
  }

  function renderTable() {
    const body = $("bases-table").tBodies[0];
    body.replaceChildren();
    if (!bases.length) {
      body.append(el("tr", {}, el("td", {colspan: 7, class: "muted"}, "No base yet: index a source below to create one.")));
    }
    for (const b of bases) {
      const status = el("span", {class: "status status-" + b.status}, statusLabel(b.status));
      body.append(el("tr", {"data-base": b.name},
        el("th", {scope: "row"}, b.name, b.kind === "memory" ? el("span", {class: "muted"}, " (memory)") : null),
        el("td", {class: "status-cell", "data-label": "Status"}, status, b.interrupted ? el("span", {class: "muted"}, " (interrupted)") : null,
          b.watched ? el("span", {class: "watch muted"}, " · watched, caught up " + (b.caught_up_at ? when(b.caught_up_at) : "not yet")) : null),
        el("td", {class: "num documents", "data-label": "Documents"}, String(b.documents)),
        el("td", {class: "num chunks", "data-label": "Chunks"}, String(b.chunks)),
        el("td", {class: "num without", "data-label": "Without vectors"}, ...withoutVectors(b)),
        el("td", {class: "when", "data-label": "Last indexed"}, when(b.last_indexed_at, b.chunks)),
        el("td", {class: "models", "data-label": "Models"}, models(b.spec || {}))));
    }
    if ($("base-names")) $("base-names").replaceChildren(...bases.map((b) => el("option", {value: b.name})));
    const select = $("notes-base");
    const chosen = select.value;
    select.replaceChildren(...bases.map((b) => el("option", {value: b.name}, b.name)));
    if (bases.some((b) => b.name === chosen)) select.value = chosen;
  }

  async function refresh() {
    try {
      bases = (await api("GET", "/bases")).bases;
    } catch (e) {
      if (e.status !== 401) showError(e.message);
      return;
    }
    renderTable();
    // While a base is indexing (here or by `metis index`), keep its row live.
    clearTimeout(refreshTimer);
    if (bases.some((b) => b.status === "indexing")) refreshTimer = setTimeout(refresh, 1000);
  }

  function progressText(job) {
    const p = job.progress;
    if (job.state === "queued") return "Waiting for the indexing job before it.";
    const total = p.documents_total === null ? "?" : p.documents_total;
    return "Indexing " + job.base + ": " + p.documents_done + " of " + total + " documents · " + p.chunks + " chunks.";
  }

  function reportText(r) {
    const failed = r.failed.length ? " · " + r.failed.length + " failed (" + r.failed.map((f) => f.path).join(", ") + ")" : "";
    const warnings = r.warnings.length ? " " + r.warnings.map(Metis.sentence).join(" ") : "";
    return r.read + " documents read: " + r.new + " new, " + r.changed + " changed, " + r.unchanged + " unchanged, " +
      r.deleted + " deleted" + failed + " · " + r.chunks + " chunks, " + r.chunks_without_vector +
      " without vectors · " + r.seconds.toFixed(1) + " s." + warnings;
  }

  async function watch(job) {
    const box = $("job");
    box.hidden = false;
    box.dataset.state = job.state;
    const bar = $("job-progress");
    for (;;) {
      box.dataset.state = job.state;
      const p = job.progress;
      if (p.documents_total) {
        bar.max = p.documents_total;
        bar.value = p.documents_done;
      } else {
        bar.removeAttribute("value");  // indeterminate until the documents are counted
      }
      if (job.state === "done") {
        bar.max = 1;
        bar.value = 1;
        $("job-state").textContent = "Done: " + job.base + " is indexed.";
        $("job-report").textContent = reportText(job.report);
        break;
      }
      if (job.state === "failed") {
        bar.max = 1;
        bar.value = 0;
        $("job-state").textContent = "Indexing " + job.base + " failed: " + Metis.sentence(job.error.message);
        $("job-report").textContent = "";
        break;
      }
      $("job-state").textContent = progressText(job);
      await refresh();
      await new Promise((resolve) => setTimeout(resolve, 300));
      try {
        job = await api("GET", "/jobs/" + encodeURIComponent(job.id));
      } catch (e) {
        if (e.status !== 401) showError(e.message);
        return;
      }
    }
    await refresh();
  }

  async function onIndex(event) {
    event.preventDefault();
    const name = $("index-base").value.trim();
    const source = $("index-source").value.trim();
    const where = $("index-path").value.trim();
    if (!name) { showError("Name the base to index into."); $("index-base").focus(); return; }
    if (!where) { showError("Name a folder or file under the source roots."); $("index-path").focus(); return; }
    clearError();
    const body = {paths: [where]};
    if (source) body.source = source;
    let job;
    try {
      job = await api("POST", path(name) + "/index", body);
    } catch (e) {
      if (e.status !== 401) showError(e.message);
      return;
    }
    $("job-report").textContent = "";
    await watch(job);
  }

  async function loadNotes() {
    const list = $("notes-list");
    const name = $("notes-base").value;
    list.replaceChildren();
    if (!name) return;
    let notes;
    try {
      notes = (await api("GET", path(name) + "/notes")).notes;
    } catch (e) {
      if (e.status !== 401) showError(e.message);
      return;
    }
    if (!notes.length) list.append(el("li", {class: "muted"}, "No note in " + name + " yet."));
    for (const n of notes) {
      const remove = el("button", {type: "button", class: "link", "aria-label": "Delete the note " + n.title}, "Delete");
      remove.addEventListener("click", async () => {
        try {
          await api("DELETE", path(name) + "/notes/" + n.note_id);
        } catch (e) {
          if (e.status !== 401) showError(e.message);
          return;
        }
        clearError();
        await loadNotes();
        await refresh();
      });
      list.append(el("li", {class: "note", "data-note": n.note_id},
        el("span", {class: "note-title"}, n.title), " ", el("span", {class: "muted"}, when(n.created_at)), " ", remove));
    }
  }

  async function onNote(event) {
    event.preventDefault();
    const name = $("notes-base").value;
    const title = $("note-title").value.trim();
    const text = $("note-text").value.trim();
    if (!name) { showError("There is no base to add a note to yet."); return; }
    if (!title) { showError("Give the note a title."); $("note-title").focus(); return; }
    if (!text) { showError("Write the note's text."); $("note-text").focus(); return; }
    try {
      await api("POST", path(name) + "/notes", {title, text});
    } catch (e) {
      if (e.status !== 401) showError(e.message);
      return;
    }
    clearError();
    $("note-title").value = "";
    $("note-text").value = "";
    await loadNotes();
    await refresh();
  }

  document.addEventListener("DOMContentLoaded", () => {
    if ($("index-form")) $("index-form").addEventListener("submit", onIndex);  // absent when indexing is off
    $("note-form").addEventListener("submit", onNote);
    $("notes-base").addEventListener("change", loadNotes);
    start(async (list) => {
      bases = list;
      renderTable();
      await loadNotes();
      await refresh();
    });
  });
})();
