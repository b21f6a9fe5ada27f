// The page's own confirmation dialog (never window.confirm) and the transient notice line.

let pending = null;

/** Ask `question` in the <dialog>; resolves true on Confirm, false on Cancel or Escape. */
export function confirm(question) {
  const dialog = document.getElementById("confirm");
  const text = document.getElementById("confirm-q");
  if (pending) pending(false);
  text.textContent = question;
  return new Promise((resolve) => {
    pending = (answer) => {
      pending = null;
      if (dialog.open) dialog.close();
      resolve(answer);
    };
    dialog.showModal();
    document.getElementById("confirm-cancel").focus();
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

/** Run an action POST after confirmation; report its result; `after` refreshes the view. */
export async function confirmed(question, action, after) {
  if (!(await confirm(question))) return;
  try {
    const result = await action();
    const changed = result?.changed?.length ?? 0;
    const skipped = result?.skipped?.length ?? 0;
    notify(`${changed} task${changed === 1 ? "" : "s"} now PENDING` + (skipped ? `, ${skipped} skipped` : "") + ".");
  } catch (err) {
    if (err.name !== "Unauthorized") notify(`Failed: ${err.message}`, true);
  }
  after();
}
