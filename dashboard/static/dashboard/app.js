// AgentCal dashboard behaviour: passkey ceremonies, copy buttons, live countdowns, clickable rows,
// confirmations. No framework. All page JavaScript lives here (or in htmx): the Content-Security-Policy
// refuses inline <script> and on...= attributes, so templates describe behaviour with data-* attributes.
"use strict";

function csrfToken() {
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.content : "";
}

async function postJSON(url, body) {
  const response = await fetch(url, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
    body: JSON.stringify(body || {}),
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.error || `Request failed (${response.status})`);
  return data;
}

function showError(root, message) {
  const el = root.querySelector("[data-passkey-error]");
  if (el) { el.textContent = message; el.hidden = false; }
}

function passkeysSupported() {
  return window.PublicKeyCredential && PublicKeyCredential.parseRequestOptionsFromJSON;
}

// Sign in with a discoverable passkey; with conditional UI the browser also offers passkeys in
// the email field's autofill.
let conditionalRequest = null;  // the pending autofill request, aborted when the button is used

async function passkeySignIn(root, conditional) {
  if (conditionalRequest) { conditionalRequest.abort(); conditionalRequest = null; }
  const options = await postJSON(root.dataset.optionsUrl);
  const publicKey = PublicKeyCredential.parseRequestOptionsFromJSON(options);
  let request = { publicKey };
  if (conditional) {
    conditionalRequest = new AbortController();
    request = { publicKey, mediation: "conditional", signal: conditionalRequest.signal };
  }
  const credential = await navigator.credentials.get(request);
  const result = await postJSON(root.dataset.verifyUrl, { credential: credential.toJSON(), next: root.dataset.next });
  window.location.assign(result.redirect);
}

async function passkeyRegister(root) {
  const options = await postJSON(root.dataset.optionsUrl);
  const publicKey = PublicKeyCredential.parseCreationOptionsFromJSON(options);
  const credential = await navigator.credentials.create({ publicKey });
  const nameInput = root.querySelector("[data-passkey-name]");
  await postJSON(root.dataset.verifyUrl, { credential: credential.toJSON(), name: nameInput ? nameInput.value : "" });
  window.location.reload();
}

function wirePasskeys() {
  const signIn = document.querySelector("[data-passkey-signin]");
  if (signIn) {
    const button = signIn.querySelector("[data-passkey-signin-button]");
    if (!passkeysSupported()) { button.disabled = true; showError(signIn, "This browser cannot use passkeys; use the email link."); }
    button.addEventListener("click", () => passkeySignIn(signIn, false).catch((e) => showError(signIn, e.message)));
    if (passkeysSupported() && PublicKeyCredential.isConditionalMediationAvailable) {
      PublicKeyCredential.isConditionalMediationAvailable().then((ok) => {
        if (ok) passkeySignIn(signIn, true).catch(() => {});
      });
    }
  }
  const register = document.querySelector("[data-passkey-register]");
  if (register) {
    register.querySelector("[data-passkey-register-button]").addEventListener("click", () =>
      passkeyRegister(register).catch((e) => showError(register, e.message)));
  }
}

function wireCopyButtons(root) {
  root.querySelectorAll("[data-copy]").forEach((button) => {
    if (button.dataset.wired) return;
    button.dataset.wired = "1";
    button.addEventListener("click", async () => {
      const target = document.getElementById(button.dataset.copy);
      try { await navigator.clipboard.writeText(target.textContent.trim()); button.textContent = "Copied"; }
      catch { window.getSelection().selectAllChildren(target); button.textContent = "Press Ctrl+C"; }
    });
  });
}

// Elements with data-countdown="<ISO time>" show the time left, e.g. "12s".
function tickCountdowns() {
  const now = Date.now();
  document.querySelectorAll("[data-countdown]").forEach((el) => {
    const left = Math.round((Date.parse(el.dataset.countdown) - now) / 1000);
    if (left <= 0) { el.textContent = el.dataset.doneText || "lapsed"; return; }
    const h = Math.floor(left / 3600), m = Math.floor((left % 3600) / 60), s = left % 60;
    el.textContent = h ? `${h}h ${m}m` : m ? `${m}m ${s}s` : `${s}s`;
  });
}

// Geometry the server computes (the calendar timeline's blocks, hour lines and now line) arrives as
// data-* attributes: the Content-Security-Policy refuses style="" attributes, but not changes made
// through the CSSOM (element.style). Run on every page load and on whatever htmx swaps in.
const GEOMETRY = { top: "top", height: "height", left: "left", width: "width", hours: "--hours" };
const GEOMETRY_SELECTOR = Object.keys(GEOMETRY).map((name) => `[data-${name}]`).join(", ");

function applyGeometry(root) {
  const elements = [...root.querySelectorAll(GEOMETRY_SELECTOR)];
  if (root.matches && root.matches(GEOMETRY_SELECTOR)) elements.push(root);
  elements.forEach((el) => {
    for (const [name, property] of Object.entries(GEOMETRY)) {
      if (name in el.dataset) el.style.setProperty(property, el.dataset[name]);
    }
  });
}

// Table rows with data-href open that page when clicked anywhere; links and controls inside a row
// keep their own behaviour (so a ctrl-click on the link still opens a new tab). Delegated, so rows
// that htmx swaps in later work too.
document.addEventListener("click", (event) => {
  const row = event.target.closest("[data-href]");
  if (!row || event.target.closest("a, button, input, select, textarea, label, summary")) return;
  window.location.assign(row.dataset.href);
});

// Forms with data-confirm="<question>" are submitted only once the question is answered yes.
document.addEventListener("submit", (event) => {
  const question = event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});

// Forms with data-omit-blank do not send the fields left blank, so the URLs htmx pushes (the audit
// filters: shareable links) stay short; the server ignores blank filters anyway.
document.addEventListener("htmx:configRequest", (event) => {
  if (!event.detail.elt.matches("[data-omit-blank]")) return;
  for (const [name, value] of Object.entries(event.detail.parameters)) {
    if (value === "") delete event.detail.parameters[name];
  }
});

document.addEventListener("DOMContentLoaded", () => {
  applyGeometry(document);
  wirePasskeys();
  wireCopyButtons(document);
  tickCountdowns();
  setInterval(tickCountdowns, 1000);
});
document.addEventListener("htmx:afterSwap", (event) => {
  applyGeometry(event.target);
  wireCopyButtons(event.target);
  tickCountdowns();
});
// Also content htmx adds outside the swap target (out-of-band swaps, history restores).
document.addEventListener("htmx:load", (event) => applyGeometry(event.detail.elt));
