// The console's shared part: the token, calls to the JSON API, sign-in, small DOM helpers.
// The token lives in sessionStorage (this tab, until it closes) and goes in the Authorization
// header of each API call: never in a URL, a cookie or a log.
"use strict";

const Metis = (() => {
  const KEY = "metis-token";

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  function $(id) { return document.getElementById(id); }

  /** Create an element: el("a", {href: "/", class: "x"}, "text", child, ...); strings become text. */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (value === true) node.setAttribute(key, "");
      else node.setAttribute(key, String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  /** One clear sentence: a capital first letter and a full stop. */
  function sentence(text) {
    const s = String(text || "").trim();
    if (!s) return "Something went wrong.";
    const first = s.charAt(0).toUpperCase() + s.slice(1);
    return /[.!?]$/.test(first) ? first : first + ".";
  }

  function token() { return sessionStorage.getItem(KEY); }

  let signedIn = null;  // what to run once a token is accepted

  async function api(method, path, body) {
    const headers = {"Accept": "application/json"};
    const t = token();
    if (t) headers["Authorization"] = "Bearer " + t;
    const init = {method, headers, credentials: "omit", cache: "no-store"};
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (e) {
      throw new ApiError(0, "NETWORK", "The metis service did not answer: is it still running?");
    }
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    if (response.status === 401) {
      sessionStorage.removeItem(KEY);
      showSignIn(t ? "The token was not accepted: sign in again." : "");
      throw new ApiError(401, "UNAUTHORIZED", "Sign in first.");
    }
    if (!response.ok) {
      const err = (data && data.error) || {};
      throw new ApiError(response.status, err.code || "HTTP_" + response.status,
                         sentence(err.message || "The service answered HTTP " + response.status));
    }
    return data;
  }

  function showError(message) {
    const box = $("page-error");
    box.textContent = sentence(message);
    box.hidden = false;
    box.scrollIntoView({block: "nearest"});  // a refusal below the fold would go unseen
  }

  function clearError() {
    const box = $("page-error");
    box.textContent = "";
    box.hidden = true;
  }

  function showSignIn(message) {
    $("main").hidden = true;
    $("sign-out").hidden = true;
    $("sign-in").hidden = false;
    const error = $("sign-in-error");
    error.textContent = message || "";
    error.hidden = !message;
    const input = $("token");
    input.value = "";
    input.focus();
  }

  function showMain() {
    $("sign-in").hidden = true;
    $("main").hidden = false;
    $("sign-out").hidden = !token();
  }

  /** Run `ready(bases)` once the service answers GET /bases (after a sign-in when it asks for a token). */
  async function start(ready) {
    signedIn = ready;
    $("sign-in-form").addEventListener("submit", onSignIn);
    $("sign-out").addEventListener("click", () => {
      sessionStorage.removeItem(KEY);
      showSignIn("Signed out.");
    });
    await enter();
  }

  async function enter() {
    let answer;
    try {
      answer = await api("GET", "/bases");
    } catch (e) {
      if (e.status !== 401) showError(e.message);
      return false;
    }
    clearError();
    showMain();
    await signedIn(answer.bases);
    return true;
  }

  async function onSignIn(event) {
    event.preventDefault();
    const value = $("token").value.trim();
    if (!value) {
      showSignIn("Type a token first.");
      return;
    }
    sessionStorage.setItem(KEY, value);
    const ok = await enter();
    if (!ok && !token()) showSignIn("That token was not accepted: check it and try again.");
  }

  const STATUS = {ready: "Ready", indexing: "Indexing", waiting: "Waiting"};
  function statusLabel(status) { return STATUS[status] || sentence(status).slice(0, -1); }

  /** `document:line` (`document:line:column`), `document p.N` (`document p.19 (printed 16)`) or the document (as Citation.location() in Python). */
  function location(citation) {
    if (citation.page !== undefined && citation.page !== null) {
      return citation.document + " p." + citation.page + (citation.page_label ? " (printed " + citation.page_label + ")" : "");
    }
    if (citation.line !== undefined && citation.line !== null) {
      const column = citation.column !== undefined && citation.column !== null ? ":" + citation.column : "";
      return citation.document + ":" + citation.line + column;
    }
    return citation.document;
  }

  /** The scores line, as Scores.line() in Python: absent steps left out. */
  function scoresLine(scores) {
    const parts = [];
    if (scores.dense !== undefined && scores.dense !== null) {
      parts.push("meaning " + scores.dense.toFixed(3) + (scores.dense_rank ? " (#" + scores.dense_rank + ")" : ""));
    }
    if (scores.keyword !== undefined && scores.keyword !== null) {
      parts.push("words " + scores.keyword.toFixed(2) + (scores.keyword_rank ? " (#" + scores.keyword_rank + ")" : ""));
    }
    if (scores.fused !== undefined && scores.fused !== null) parts.push("fused " + scores.fused.toFixed(4));
    if (scores.rerank !== undefined && scores.rerank !== null) parts.push("reranker " + scores.rerank.toFixed(3));
    return parts.join(" · ");
  }

  /** When a base was last indexed; a base with chunks but no finished run: "not finished yet". */
  function when(iso, chunks) {
    if (!iso) return chunks ? "not finished yet" : "never";
    const d = new Date(iso);
    if (isNaN(d)) return iso;
    const pad = (n) => String(n).padStart(2, "0");
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes());
  }

  return {ApiError, $, el, sentence, api, start, showError, clearError, statusLabel, location, scoresLine, when};
})();
