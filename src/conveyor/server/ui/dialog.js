// The page's own confirmation dialog (never window.confirm) and the transient notice line.

let pending = null;

/** Ask `question` in the <dialog>; resolves true on Confirm, false on Cancel or Escape.
 * `extra` (a node: a checkbox, say) is shown under the question while the dialog is open;
 * `ok` and `dismiss` name its two buttons ("Confirm" and "Cancel" unless given). */
export function confirm(question, { extra = null, ok = "Confirm", dismiss = "Cancel" } = {}) {
  const dialog = document.getElementById("confirm");
  const text = document.getElementById("confirm-q");
  const okButton = document.getElementById("confirm-ok");
  const dismissButton = document.getElementById("confirm-cancel");
  if (pending) pending(false);
  text.textContent = question;
  okButton.textContent = ok;
  dismissButton.textContent = dismiss;
  if (extra) text.after(extra);
  return new Promise((resolve) => {
    pending = (answer) => {
      pending = null;
      if (dialog.open) dialog.close();
      extra?.remove();
      resolve(answer);
    };
    dialog.showModal();
    dismissButton.focus();
  });
}

export function initDialog() {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-ok").addEventListener("click", () => pending?.(true));
  document.getElementById("confirm-cancel").addEventListener("click", () => pending?.(false));
  dialog.addEventListener("close", () => pending?.(false));
}

let noticeTimer = 0;

/** Show a short message (result of an action, or an error) for a few seconds. */
export function notify(message, isError = false) {
  const el = document.getElementById("notice");
  el.textContent = message;
  el.classList.toggle("error", isError);
  el.hidden = false;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => {
    el.hidden = true;
  }, 8000);
}

const nowPending = (result) => {
  const changed = result?.changed?.length ?? 0;
  const skipped = result?.skipped?.length ?? 0;
  return `${changed} task${changed === 1 ? "" : "s"} now PENDING` + (skipped ? `, ${skipped} skipped` : "") + ".";
};

/** Run an action POST after confirmation; report its result; `after` refreshes the view.
 * `options` go to confirm(), and `report(result)` words the result (default: how many tasks
 * are now PENDING). */
export async function confirmed(question, action, after, { report = nowPending, ...options } = {}) {
  if (!(await confirm(question, options))) return;
  try {
    notify(report(await action()));
  } catch (err) {
    if (err.name !== "Unauthorized") notify(`Failed: ${err.message}`, true);
  }
  after();
}
