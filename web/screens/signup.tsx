/**
 * Creating an account: a handle under one of the account host's domains, a password, and an
 * invite code when `describeServer` says invites are required.
 *
 * @module
 */

import type { JSX } from "preact";
import { useState } from "preact/hooks";
import { ErrorBox, Loading } from "../components/states.tsx";
import { MIN_PASSWORD, TextField } from "../components/text_field.tsx";
import { errorText, useLoad } from "../hooks.ts";
import { useApp } from "../state.ts";

/** The sign-up screen. */
export function Signup(): JSX.Element {
  const app = useApp();
  const [server, reload] = useLoad(() => app.client.describeServer(), []);
  const [name, setName] = useState("");
  const [domain, setDomain] = useState<string | null>(null);
  const [password, setPassword] = useState("");
  const [invite, setInvite] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);

  if (server.status === "loading") return <Loading label="Loading the server's sign-up rules…" />;
  if (server.status === "error") return <ErrorBox message={server.error} retry={reload} />;
  const domains = server.data.availableUserDomains;
  const suffix = domain ?? domains[0] ?? "";
  const needsInvite = server.data.inviteCodeRequired;

  function handleOf(raw: string): string {
    const h = raw.trim().replace(/^@/, "").toLowerCase();
    return domains.some((d) => h.endsWith(d)) ? h : `${h}${suffix}`;
  }

  async function submit(e: Event): Promise<void> {
    e.preventDefault();
    if (password.length < MIN_PASSWORD) {
      setError(`The password needs at least ${MIN_PASSWORD} characters`);
      return;
    }
    setBusy(true);
    setError(null);
    try {
      const session = await app.client.createAccount({
        handle: handleOf(name),
        password,
        inviteCode: needsInvite ? invite.trim() : undefined,
      });
      app.signedIn(session);
    } catch (err) {
      setError(errorText(err));
      setBusy(false);
    }
  }

  return (
    <div class="auth">
      <h1 class="screen-title">Create an account</h1>
      <form class="form" onSubmit={submit} aria-busy={busy}>
        <label for="signup-handle">Handle</label>
        <div class="handle-field">
          <input
            id="signup-handle"
            type="text"
            autoComplete="username"
            autoCapitalize="none"
            spellcheck={false}
            required
            value={name}
            placeholder="alice"
            aria-describedby="signup-handle-hint"
            onInput={(e) => setName((e.target as HTMLInputElement).value)}
          />
          {domains.length > 1
            ? (
              <select
                aria-label="Handle domain"
                value={suffix}
                onChange={(e) => setDomain((e.target as HTMLSelectElement).value)}
              >
                {domains.map((d) => <option key={d} value={d}>{d}</option>)}
              </select>
            )
            : <span class="suffix">{suffix}</span>}
        </div>
        <p id="signup-handle-hint" class="hint">
          Your handle will be{" "}
          {name.trim() ? <strong>@{handleOf(name)}</strong> : `a name ending in ${suffix}`}.
        </p>
        <TextField
          id="signup-password"
          label="Password"
          type="password"
          autoComplete="new-password"
          required
          minLength={MIN_PASSWORD}
          value={password}
          onValue={setPassword}
          hint={`At least ${MIN_PASSWORD} characters.`}
        />
        {needsInvite && (
          <>
            <TextField
              id="signup-invite"
              label="Invite code"
              type="text"
              autoComplete="off"
              required
              value={invite}
              onValue={setInvite}
              hint="This server needs an invite: ask its operator for a code."
            />
          </>
        )}
        {error && <p class="inline-error" role="alert">{error}</p>}
        <button type="submit" class="button" disabled={busy}>
          {busy ? "Creating…" : "Create account"}
        </button>
      </form>
      <p class="aside">
        Already have an account? <a href="/login">Log in</a>
      </p>
    </div>
  );
}
