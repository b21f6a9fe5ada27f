// The sign-in form: the token is posted as JSON with fetch (never a form submission);
// the server answers with an HttpOnly session cookie.
import * as api from "./api.js";
import { h } from "./dom.js";

/** Build the sign-in view; `onSignedIn` runs once the server accepted the token. */
export function signinView(onSignedIn) {
  const input = h("input", {
    type: "password",
    name: "token",
    "aria-label": "Token",
    autocomplete: "current-password",
    required: true,
  });
  const error = h("p", { class: "form-error", role: "alert" });
  const button = h("button", { type: "submit" }, "Sign in");
  const form = h(
    "form",
    { "data-testid": "signin-form", class: "signin", "aria-labelledby": "signin-h" },
    h("label", null, h("span", { class: "label" }, "Token"), input),
    button,
    error,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    error.textContent = "";
    button.disabled = true;
    try {
      await api.login(input.value);
      input.value = "";
      onSignedIn();
    } catch (err) {
      if (err.status === 401) error.textContent = "Wrong token";
      else error.textContent = `Could not sign in: ${err.message}`;
      input.select();
    } finally {
      button.disabled = false;
    }
  });
  const el = h(
    "section",
    { class: "view signin-view" },
    h("h1", { "data-testid": "view-title", id: "signin-h" }, "Sign in"),
    h("p", null, "This scheduler needs a token. Enter it to continue."),
    form,
  );
  return { el, focus: () => input.focus() };
}
