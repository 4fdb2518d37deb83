/**
 * Logging in with a handle (or DID) and password, with the reason shown when the member was sent
 * here because the session ended.
 *
 * @module
 */

import type { JSX } from "preact";
import { useState } from "preact/hooks";
import { TextField } from "../components/text_field.tsx";
import { errorText } from "../hooks.ts";
import { useApp } from "../state.ts";

/** The login screen. */
export function Login(): JSX.Element {
  const app = useApp();
  const [identifier, setIdentifier] = useState("");
  const [password, setPassword] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);

  async function submit(e: Event): Promise<void> {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      app.signedIn(await app.client.login(identifier.trim().replace(/^@/, ""), password));
    } catch (err) {
      setError(errorText(err));
      setBusy(false);
    }
  }

  return (
    <div class="auth">
      <h1 class="screen-title">Log in</h1>
      {app.notice && <p class="notice" role="status">{app.notice}</p>}
      <form class="form" onSubmit={submit} aria-busy={busy}>
        <TextField
          id="login-identifier"
          label="Handle"
          type="text"
          autoComplete="username"
          autoCapitalize="none"
          spellcheck={false}
          required
          value={identifier}
          placeholder="alice.test"
          onValue={setIdentifier}
        />
        <TextField
          id="login-password"
          label="Password"
          type="password"
          autoComplete="current-password"
          required
          value={password}
          onValue={setPassword}
        />
        {error && <p class="inline-error" role="alert">{error}</p>}
        <button type="submit" class="button" disabled={busy}>
          {busy ? "Logging in…" : "Log in"}
        </button>
      </form>
      <p class="aside">
        New here? <a href="/signup">Create an account</a>
      </p>
    </div>
  );
}
