// AgentCal dashboard behaviour: passkey ceremonies, copy buttons, live countdowns, clickable rows,
// confirmations. No framework. All page JavaScript lives here (or in htmx, or rules.js for the calendar
// rules editor): the Content-Security-Policy refuses inline <script> and on...= attributes, so templates
// describe behaviour with data-* attributes.
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
  const result = await postJSON(root.dataset.verifyUrl, { credential: credential.toJSON(), next: root.dataset.next, time_zone: browserZone() });
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

// A page sent in answer to a POST (a form back with its errors, a confirm step) carries its GET address in
// data-replace-url (templates/base.html). Put there in place of the POST's, the history entry no longer
// holds the POST: a reload fetches the page with GET instead of sending the form again. The fragment stays.
function forgetPost() {
  const url = document.body.dataset.replaceUrl;
  if (url) history.replaceState(null, "", url + window.location.hash);
}
document.addEventListener("DOMContentLoaded", forgetPost);

// Elements with data-countdown="<ISO time>" show the time left, e.g. "12s". Where the page says what time
// the server had (data-server-now: the database's clock, which decides when a hold lapses or a booking
// freezes), countdowns run on that clock, so they end when the server's label changes, not a browser
// clock's skew earlier or later.
let serverClockOffset = 0;

function readServerClock(root) {
  const stamp = root.querySelector && root.querySelector("[data-server-now]");
  if (stamp) serverClockOffset = Date.parse(stamp.dataset.serverNow) - Date.now();
}

// A label with data-until="<ISO time>" (a status word, then its countdown) becomes data-after-text, whole,
// at that moment: its first child (the status word) takes the new text and the countdown goes, so the old
// and the new state never show side by side. data-after-kind restyles the block around it the same way
// (its next poll brings the server's own label).
function settleLabels(now) {
  document.querySelectorAll("[data-until]").forEach((label) => {
    if (Date.parse(label.dataset.until) > now) return;
    const status = label.firstElementChild;
    status.textContent = label.dataset.afterText;
    label.replaceChildren(status);
    label.removeAttribute("data-until");
    const block = label.closest(".block");
    if (block && label.dataset.afterKind) {
      block.classList.remove("held", "committed", "frozen", "ended");
      block.classList.add(label.dataset.afterKind);
      block.dataset.status = label.dataset.afterText;
    }
  });
}

function tickCountdowns() {
  const now = Date.now() + serverClockOffset;
  settleLabels(now);
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

// Forms with data-confirm="<question>" ask first, in the page, as approving, denying and cancelling do: the
// form steps aside for a confirm box with the question, "Yes, …" (data-confirm-yes) and "Keep it". Yes
// submits the form as it was; Keep it (or Escape) brings the form back with the focus on its button.
let confirmCount = 0;

function askInline(form, submitter) {
  const box = document.createElement("div");
  box.className = "confirm inline-confirm";
  box.dataset.testid = "inline-confirm";
  box.setAttribute("role", "group");
  const question = document.createElement("p");
  question.id = `inline-confirm-${++confirmCount}`;
  question.tabIndex = -1;
  question.textContent = form.dataset.confirm;
  box.setAttribute("aria-labelledby", question.id);
  const yes = document.createElement("button");
  yes.type = "button";
  yes.className = "button small danger solid";
  yes.dataset.testid = "confirm-yes";
  yes.textContent = form.dataset.confirmYes || "Yes";
  const keep = document.createElement("button");
  keep.type = "button";
  keep.className = "button small";
  keep.dataset.testid = "confirm-keep";
  keep.textContent = "Keep it";
  const buttons = document.createElement("div");
  buttons.className = "row";
  buttons.append(yes, keep);
  box.append(question, buttons);
  const back = () => {
    box.remove();
    form.hidden = false;
    (submitter || form.querySelector("button")).focus();
  };
  yes.addEventListener("click", () => {
    form.dataset.confirmed = "yes";
    box.remove();
    form.hidden = false;
    form.requestSubmit(submitter || undefined);
  });
  keep.addEventListener("click", back);
  box.addEventListener("keydown", (event) => { if (event.key === "Escape") { event.preventDefault(); back(); } });
  form.hidden = true;
  form.after(box);
  question.focus();
}

document.addEventListener("submit", (event) => {
  const form = event.target;
  if (!form.dataset.confirm || form.dataset.confirmed === "yes") return;
  event.preventDefault();
  askInline(form, event.submitter);
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
  readServerClock(document);
  tickCountdowns();
  setInterval(tickCountdowns, 1000);
});
document.addEventListener("htmx:afterSwap", (event) => {
  applyGeometry(event.target);
  wireCopyButtons(event.target);
  readServerClock(event.target);
  tickCountdowns();
});
// Also content htmx adds outside the swap target (out-of-band swaps, history restores).
document.addEventListener("htmx:load", (event) => applyGeometry(event.detail.elt));

// --- Layout: the narrow screens' Menu button, and tables as cards on phones (templates/base.html) ---------

// Below 860 px the sidebar folds into a bar with a Menu button (app.css shows the button only where
// scripting runs, so without JavaScript the menu simply stays open). A disclosure: aria-expanded says
// whether the menu shows; opening moves the focus to its first link, Escape closes it and gives the focus
// back to the button.
function wireMenu() {
  const button = document.querySelector("[data-menu-button]");
  if (!button) return;
  const menu = document.getElementById(button.getAttribute("aria-controls"));
  const isOpen = () => button.getAttribute("aria-expanded") === "true";
  const setOpen = (open) => {
    button.setAttribute("aria-expanded", String(open));
    menu.classList.toggle("open", open);
  };
  button.addEventListener("click", () => {
    setOpen(!isOpen());
    if (isOpen()) {
      const first = menu.querySelector("a[href], button");
      if (first) first.focus();
    }
  });
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || !isOpen()) return;
    if (!menu.contains(document.activeElement) && document.activeElement !== button) return;
    setOpen(false);
    button.focus();
  });
}

// On a phone each row of a .table is a card (app.css) whose cells show their column's heading: copy the
// headings into data-label. Cells that already carry one keep it; cells spanning columns get none.
function labelTableCells() {
  document.querySelectorAll("table.table").forEach((table) => {
    const headings = [];
    table.querySelectorAll(":scope > thead > tr:first-child > th").forEach((th) => {
      for (let i = 0; i < th.colSpan; i++) headings.push(th.textContent.trim());
    });
    if (!headings.length) return;
    table.querySelectorAll(":scope > tbody > tr").forEach((row) => {
      let column = 0;
      for (const cell of row.cells) {
        if (cell.colSpan === 1 && !cell.hasAttribute("data-label")) cell.dataset.label = headings[column] || "";
        column += cell.colSpan;
      }
    });
  });
}

// A box that scrolls sideways must be reachable from the keyboard to be scrolled (WCAG 2.1.1): where one
// overflows and holds nothing focusable, the box itself takes the focus.
function focusableScrollBoxes() {
  document.querySelectorAll(".card.flush, .scroll-x, .secret, pre").forEach((box) => {
    if (box.scrollWidth <= box.clientWidth + 1 || box.hasAttribute("tabindex")) return;
    if (!box.querySelector("a[href], button, input, select, textarea, [tabindex]")) box.tabIndex = 0;
  });
}

function layoutPage() {
  labelTableCells();
  focusableScrollBoxes();
}

let layoutTimer = null;
document.addEventListener("DOMContentLoaded", () => {
  wireMenu();
  layoutPage();
});
// Right after a swap (before the browser paints the new rows without their labels), and again once
// htmx has settled (out-of-band swaps, restored history).
document.addEventListener("htmx:afterSwap", layoutPage);
document.addEventListener("htmx:afterSettle", layoutPage);
window.addEventListener("resize", () => {
  clearTimeout(layoutTimer);
  layoutTimer = setTimeout(focusableScrollBoxes, 200);
});

// --- Approvals: the pending count in the tab title (dashboard/templates/dashboard/approvals) -------------

// The sidebar's badge (#pending-badge) polls its own count; the tab title follows it, "(3) Approvals ·
// AgentCal", so a background tab shows what waits. Run on load and after every htmx swap (the badge's
// own poll, or an open approval's poll bringing a new badge out of band).
function syncTitleWithPendingCount() {
  const badge = document.getElementById("pending-badge");
  if (!badge) return;
  const count = parseInt(badge.dataset.pendingCount || "0", 10);
  const title = document.title.replace(/^\(\d+\) /, "");
  document.title = count > 0 ? `(${count}) ${title}` : title;
}
document.addEventListener("DOMContentLoaded", syncTitleWithPendingCount);
document.addEventListener("htmx:afterSettle", syncTitleWithPendingCount);

// --- Calendar page: the reservation drawer (dashboard/templates/dashboard/calendars) ---------------------
// A block (or a row of the list) is a link to its reservation's page; htmx loads that page's drawer partial
// into #drawer-body, and this opens the <dialog id="cal-drawer"> around it as a modal: the focus moves in
// and stays there, Escape (the dialog's own cancel) or the ✕ closes it, and the focus goes back to the
// block that opened it (found again by id: the timeline re-renders every few seconds). The address bar
// carries #<hold or booking id>, so a link such as an approval's opens the same drawer.
const RESERVATION_HASH = /^#((?:hld|bk)_[A-Za-z0-9]+)$/;

// The timeline's blocks carry ids, so htmx gives the focus back to the same block after each poll. For
// an element with an id htmx would also copy its old "style" attribute across the swap (its settle step),
// and this page's style is the geometry applyGeometry set through the CSSOM: written back as an attribute
// it is an inline style, which the Content-Security-Policy refuses. Nothing here needs it settled:
// applyGeometry runs on every swap.
if (window.htmx) htmx.config.attributesToSettle = htmx.config.attributesToSettle.filter((name) => name !== "style");
let drawerOpener = null;  // the id of the block or row that opened the drawer (both keep theirs across polls)

function calendarDrawer() {
  return document.getElementById("cal-drawer");
}

function focusDrawer(dialog) {
  const target = [...dialog.querySelectorAll("[data-drawer-focus]")].pop() || dialog.querySelector("h2");
  if (target) target.focus();
}

document.addEventListener("click", (event) => {
  const opener = event.target.closest("[data-drawer-open]");
  if (opener) drawerOpener = opener.id;
  const dialog = calendarDrawer();
  if (!dialog || !dialog.open) return;
  // The ✕ is a link back to the calendar for pages without JavaScript; here it only closes the drawer.
  if (event.target.closest("[data-drawer-close]")) { event.preventDefault(); dialog.close(); return; }
  if (event.target === dialog) dialog.close();  // a click on the backdrop
});

document.addEventListener("htmx:afterSwap", (event) => {
  const dialog = calendarDrawer();
  if (!dialog || event.detail.target.id !== "drawer-body") return;
  if (!dialog.open) dialog.showModal();
  focusDrawer(dialog);
  const content = dialog.querySelector("[data-drawer-reservation]");
  if (content) history.replaceState(null, "", `#${content.dataset.drawerReservation}`);
});

function wireCalendarDrawer() {
  const dialog = calendarDrawer();
  if (!dialog) return;
  dialog.addEventListener("close", () => {
    history.replaceState(null, "", window.location.pathname + window.location.search);
    const back = drawerOpener && document.getElementById(drawerOpener);
    drawerOpener = null;
    if (back) back.focus();
  });
  // Opened from a link that names a reservation: load its drawer (whether or not its block is in view).
  const match = RESERVATION_HASH.exec(window.location.hash);
  if (match && window.htmx) {
    const block = document.querySelector(`a.block[data-hold="${match[1]}"], a.block[data-reservation="${match[1]}"]`);
    if (block) { drawerOpener = block.id; block.scrollIntoView({ block: "center" }); }
    htmx.ajax("GET", dialog.dataset.drawerUrl.replace("__id__", match[1]), { target: "#drawer-body", swap: "innerHTML" });
  }
}

document.addEventListener("DOMContentLoaded", wireCalendarDrawer);

// Phones: a week is seven columns on a screen that fits one, and opened at Monday it hides today. A calendar
// whose URL names no view opens on a day instead (the toolbar's data-narrow-url: the day view of the date
// asked for, today by default); a week chosen on purpose scrolls sideways to today's column, and keeps its
// place when the timeline polls.
const PHONE_SCREEN = window.matchMedia("(max-width: 599px)");

function scrollTodayIntoView() {
  const box = document.querySelector(".timeline-scroll");
  const today = box && box.querySelector(".timeline-col.today");
  if (!today || box.scrollWidth <= box.clientWidth) return;
  const gutter = box.querySelector(".timeline-col.gutter");
  const hidden = gutter ? gutter.getBoundingClientRect().width : 0;  // the sticky hours cover the left edge
  box.scrollLeft += today.getBoundingClientRect().left - box.getBoundingClientRect().left - hidden;
}

function fitCalendarToScreen() {
  const toolbar = document.querySelector(".cal-toolbar");
  if (!toolbar) return;
  if (PHONE_SCREEN.matches && toolbar.dataset.narrowUrl) {
    window.location.replace(toolbar.dataset.narrowUrl + window.location.hash);
    return;
  }
  scrollTodayIntoView();
}
document.addEventListener("DOMContentLoaded", fitCalendarToScreen);

let timelineScrollLeft = null;
document.addEventListener("htmx:beforeSwap", (event) => {
  if (event.detail.target.id !== "timeline-live") return;
  const box = event.detail.target.querySelector(".timeline-scroll");
  timelineScrollLeft = box ? box.scrollLeft : null;
});
document.addEventListener("htmx:afterSwap", (event) => {
  if (event.detail.target.id !== "timeline-live" || timelineScrollLeft === null) return;
  const box = event.detail.target.querySelector(".timeline-scroll");
  if (box) box.scrollLeft = timelineScrollLeft;
  timelineScrollLeft = null;
});

// The phone's "View" button shows or hides the calendar's switches (a disclosure, like the Menu button).
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-view-toggle]");
  if (!button) return;
  const open = button.getAttribute("aria-expanded") !== "true";
  button.setAttribute("aria-expanded", String(open));
  document.getElementById(button.getAttribute("aria-controls")).classList.toggle("open", open);
});

// Term links (a.term, href="#term-…") explain a word in a tooltip and lead to the page's glossary, a
// <details> closed by default: open it before the browser scrolls to the entry.
document.addEventListener("click", (event) => {
  const term = event.target.closest("a.term[href^='#']");
  if (!term) return;
  const entry = document.getElementById(term.getAttribute("href").slice(1));
  const glossary = entry && entry.closest("details");
  if (glossary) glossary.open = true;
});

// --- Audit trail, getting started (dashboard/templates/dashboard/{audit,home}) -----------------------------

// A row's Details button shows or hides the row below it, which holds the full record (htmx loads it on
// the first click). Delegated: rows arrive with every filter change.
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-record-toggle]");
  if (!button) return;
  const row = document.getElementById(button.getAttribute("aria-controls"));
  if (!row) return;
  const open = button.getAttribute("aria-expanded") !== "true";
  button.setAttribute("aria-expanded", String(open));
  row.hidden = !open;
});

// An id's copy button (data-copy-text="<id>"): copies the id, shows "Copied" for a moment and says so to
// screen readers through a shared live region. Where the clipboard is refused, the id is selected instead.
function announce(message) {
  let region = document.getElementById("copy-status");
  if (!region) {
    region = document.createElement("div");
    region.id = "copy-status";
    region.className = "visually-hidden";
    region.setAttribute("role", "status");
    document.body.appendChild(region);
  }
  region.textContent = "";
  setTimeout(() => { region.textContent = message; }, 50);
}

document.addEventListener("click", async (event) => {
  const button = event.target.closest("[data-copy-text]");
  if (!button) return;
  const label = button.querySelector(".id-copy-label") || button;
  const value = button.dataset.copyText;
  try {
    await navigator.clipboard.writeText(value);
    label.textContent = "Copied";
    button.classList.add("copied");
    announce(`Copied ${value}`);
  } catch {
    const text = button.parentElement.querySelector(".id-text");
    if (text) window.getSelection().selectAllChildren(text);
    label.textContent = "Press Ctrl+C";
  }
  clearTimeout(button.copyTimer);
  button.copyTimer = setTimeout(() => { label.textContent = "Copy"; button.classList.remove("copied"); }, 2500);
});

// The audit filters fold into a "Filters" disclosure on phones (app.css shows its summary there only):
// open on wider screens, folded when the page loads narrow, and opened again if the window widens.
function foldFilters() {
  const fold = document.querySelector("[data-fold-filters]");
  if (!fold) return;
  const narrow = window.matchMedia("(max-width: 600px)");
  fold.open = !narrow.matches;
  narrow.addEventListener("change", () => { if (!narrow.matches) fold.open = true; });
}
document.addEventListener("DOMContentLoaded", foldFilters);

// Moments of people's and agents' actions render in the viewer's own zone, which only the browser knows:
// tell the server when it differs from the stored one (a new person, or one who travelled). Pages from
// the next one on read in it; this one stays as rendered, labelled with the zone it is in.
function browserZone() {
  try { return Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { return ""; }
}

function rememberBrowserZone() {
  const url = document.body.dataset.zoneUrl;
  const zone = browserZone();
  if (!url || !zone || zone === document.body.dataset.viewerZone) return;
  const asked = `agentcal-zone-sent:${zone}`;
  if (sessionStorage.getItem(asked)) return;  // once per zone and tab session, even if the server says no
  sessionStorage.setItem(asked, "1");
  postJSON(url, { time_zone: zone }).then(() => { document.body.dataset.viewerZone = zone; }).catch(() => {});
}
document.addEventListener("DOMContentLoaded", rememberBrowserZone);

// The time zone picker: a combobox over the IANA names of the input's datalist, filtered as one types, so
// "berlin" or "new york" finds the zone without knowing its region. The server still checks the name.
const MAX_ZONE_OPTIONS = 40;

function zoneMatches(zones, typed) {
  const query = typed.trim().toLowerCase().replace(/\s+/g, "_");
  if (!query) return zones.slice(0, MAX_ZONE_OPTIONS);
  // Best first: the place itself starts with it ("Berlin"), then any part does ("Europe"), then anywhere.
  const rank = (zone) => {
    const name = zone.toLowerCase();
    const parts = name.split("/");
    if (parts[parts.length - 1].startsWith(query)) return 0;
    if (parts.some((part) => part.startsWith(query)) || name.startsWith(query)) return 1;
    return name.includes(query) ? 2 : 3;
  };
  return zones
    .map((zone) => [rank(zone), zone])
    .filter(([r]) => r < 3)
    .sort((a, b) => a[0] - b[0] || a[1].localeCompare(b[1]))
    .slice(0, MAX_ZONE_OPTIONS)
    .map(([, zone]) => zone);
}

function wireZonePicker(input) {
  const datalist = document.getElementById(input.dataset.zonePicker);
  const listbox = document.getElementById(`${input.id}-options`);
  if (!datalist || !listbox || input.dataset.zonePickerWired) return;
  input.dataset.zonePickerWired = "1";
  const zones = [...datalist.options].map((option) => option.value);
  input.removeAttribute("list");  // our listbox replaces the browser's own suggestions
  input.setAttribute("role", "combobox");
  input.setAttribute("aria-autocomplete", "list");
  input.setAttribute("aria-expanded", "false");
  input.setAttribute("aria-controls", listbox.id);
  let active = -1;

  const options = () => [...listbox.querySelectorAll("[role=option]")];
  const close = () => {
    listbox.hidden = true;
    input.setAttribute("aria-expanded", "false");
    input.removeAttribute("aria-activedescendant");
    active = -1;
  };
  const highlight = (index) => {
    const all = options();
    if (!all.length) return;
    active = (index + all.length) % all.length;
    all.forEach((option, i) => option.setAttribute("aria-selected", i === active ? "true" : "false"));
    input.setAttribute("aria-activedescendant", all[active].id);
    all[active].scrollIntoView({ block: "nearest" });
  };
  const pick = (zone) => {
    input.value = zone;
    close();
    input.dispatchEvent(new Event("change", { bubbles: true }));
  };
  const open = () => {
    const found = zoneMatches(zones, input.value);
    listbox.replaceChildren(...found.map((zone, i) => {
      const option = document.createElement("li");
      option.id = `${listbox.id}-${i}`;
      option.setAttribute("role", "option");
      option.setAttribute("aria-selected", "false");
      option.dataset.zone = zone;
      option.textContent = zone.replaceAll("_", " ");
      return option;
    }));
    if (!found.length) {
      const none = document.createElement("li");
      none.className = "zone-none";
      none.textContent = "No time zone matches";
      listbox.append(none);
    }
    listbox.hidden = false;
    input.setAttribute("aria-expanded", "true");
    active = -1;
    input.removeAttribute("aria-activedescendant");
  };

  input.addEventListener("input", open);
  input.addEventListener("keydown", (event) => {
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      if (listbox.hidden) open();
      highlight(active + (event.key === "ArrowDown" ? 1 : -1));
    } else if (event.key === "Enter" && !listbox.hidden && active >= 0) {
      event.preventDefault();  // picks the zone rather than submitting the form
      pick(options()[active].dataset.zone);
    } else if (event.key === "Escape" && !listbox.hidden) {
      event.preventDefault();
      close();
    }
  });
  // mousedown, not click: the input keeps the focus, so its blur does not close the list first.
  listbox.addEventListener("mousedown", (event) => {
    const option = event.target.closest("[role=option]");
    event.preventDefault();
    if (option) pick(option.dataset.zone);
  });
  input.addEventListener("blur", close);

  // A calendar being created (or not set up yet) starts in the browser's own zone.
  if (input.hasAttribute("data-suggest-browser-zone")) {
    const zone = browserZone();
    if (zone && zones.includes(zone) && zone !== input.value) {
      input.value = zone;
      const note = input.closest("form")?.querySelector("[data-zone-note]");
      if (note) note.hidden = false;
      // The rules preview redraws in the suggested zone; on "load", once htmx has wired it up.
      const redraw = () => input.dispatchEvent(new Event("change", { bubbles: true }));
      if (document.readyState === "complete") redraw();
      else window.addEventListener("load", redraw);
    }
  }
}

document.addEventListener("DOMContentLoaded", () => document.querySelectorAll("[data-zone-picker]").forEach(wireZonePicker));
document.addEventListener("htmx:afterSwap", (event) => event.target.querySelectorAll("[data-zone-picker]").forEach(wireZonePicker));
