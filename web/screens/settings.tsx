/**
 * The member's settings (`/settings`): change the password (spec 4.1 rule 9), app passwords for
 * third-party clients (rule 12), the muted accounts (4.2 rule 11), what the server's operator
 * removed (4.1 rule 15) and deleting the account (4.1 rule 13). Each part loads, fails and stays
 * empty on its own.
 *
 * @module
 */

import type { JSX } from "preact";
import { useState } from "preact/hooks";
import type { ActorProfile, AppPasswordCreated, RecordTakedownInfo } from "../../shared/client.ts";
import {
  COLLECTION_BLOCK,
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_PROFILE,
  COLLECTION_REPOST,
} from "../../shared/nsid.ts";
import { ActorCard } from "../components/actor_card.tsx";
import { Empty, ErrorBox, Loading } from "../components/states.tsx";
import { MAX_PASSWORD, MIN_PASSWORD, TextField } from "../components/text_field.tsx";
import { errorText, useLoad, usePaged, useSessionGuard } from "../hooks.ts";
import { useApp } from "../state.ts";

/** Runs `fn` with busy and error state; a lost session logs out. */
function useAction(): {
  busy: boolean;
  error: string | null;
  setError: (e: string | null) => void;
  run: (fn: () => Promise<void>) => Promise<void>;
} {
  const guard = useSessionGuard();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  async function run(fn: () => Promise<void>): Promise<void> {
    setBusy(true);
    setError(null);
    try {
      await fn();
    } catch (err) {
      if (!guard(err)) setError(errorText(err));
    } finally {
      setBusy(false);
    }
  }
  return { busy, error, setError, run };
}

/** The settings screen. */
export function Settings(): JSX.Element {
  return (
    <>
      <h1 class="screen-title">Settings</h1>
      <p class="hint">
        <a href="/settings/profile">Edit your profile</a> (name, picture, description).
      </p>
      <ChangePassword />
      <AppPasswords />
      <MutedAccounts />
      <RemovedByOperator />
      <DeleteAccount />
    </>
  );
}

function ChangePassword(): JSX.Element {
  const app = useApp();
  const action = useAction();
  const [current, setCurrent] = useState("");
  const [next, setNext] = useState("");
  const [done, setDone] = useState(false);

  function submit(e: Event): void {
    e.preventDefault();
    setDone(false);
    if (next.length < MIN_PASSWORD || next.length > MAX_PASSWORD) {
      action.setError(
        `The new password needs ${MIN_PASSWORD} to ${MAX_PASSWORD} characters`,
      );
      return;
    }
    action.run(async () => {
      const session = await app.client.changePassword(current, next);
      app.signedIn(session);
      setCurrent("");
      setNext("");
      setDone(true);
    });
  }

  return (
    <section class="settings-part" aria-labelledby="password-title">
      <h2 id="password-title" class="section-title">Password</h2>
      <form class="form" onSubmit={submit} aria-busy={action.busy}>
        <TextField
          id="password-current"
          label="Current password"
          type="password"
          autoComplete="current-password"
          required
          value={current}
          onValue={setCurrent}
        />
        <TextField
          id="password-new"
          label="New password"
          type="password"
          autoComplete="new-password"
          required
          minLength={MIN_PASSWORD}
          maxLength={MAX_PASSWORD}
          value={next}
          onValue={setNext}
          hint={`At least ${MIN_PASSWORD} characters. Your other logins end; this one stays.`}
        />
        {action.error && <p class="inline-error" role="alert">{action.error}</p>}
        {done && <p class="notice" role="status">Your password is changed.</p>}
        <button type="submit" class="button" disabled={action.busy}>
          {action.busy ? "Changing…" : "Change password"}
        </button>
      </form>
    </section>
  );
}

function AppPasswords(): JSX.Element {
  const app = useApp();
  const [state, reload, set] = useLoad(() => app.client.listAppPasswords(), []);
  const action = useAction();
  const [name, setName] = useState("");
  const [created, setCreated] = useState<AppPasswordCreated | null>(null);

  function submit(e: Event): void {
    e.preventDefault();
    action.run(async () => {
      const made = await app.client.createAppPassword(name.trim());
      setCreated(made);
      setName("");
      set(await app.client.listAppPasswords());
    });
  }

  function revoke(revoked: string): void {
    action.run(async () => {
      await app.client.revokeAppPassword(revoked);
      if (created?.name === revoked) setCreated(null);
      set(await app.client.listAppPasswords());
    });
  }

  return (
    <section class="settings-part" aria-labelledby="app-passwords-title">
      <h2 id="app-passwords-title" class="section-title">App passwords</h2>
      <p class="hint">
        Give another app its own password: it can post and read, but cannot change your password or
        handle, or delete your account. Revoke it any time.
      </p>
      {state.status === "loading" && <Loading label="Loading app passwords…" />}
      {state.status === "error" && <ErrorBox message={state.error} retry={reload} />}
      {state.status === "ok" && state.data.passwords.length === 0 && (
        <Empty>
          <p>No app passwords yet.</p>
        </Empty>
      )}
      {state.status === "ok" && state.data.passwords.length > 0 && (
        <ul class="settings-list" aria-label="App passwords">
          {state.data.passwords.map((p) => (
            <li key={p.name}>
              <span class="settings-item">
                <strong>{p.name}</strong>
                <span class="hint">created {new Date(p.createdAt).toLocaleString()}</span>
              </span>
              <button
                type="button"
                class="button small secondary danger"
                aria-label={`Revoke ${p.name}`}
                disabled={action.busy}
                onClick={() => revoke(p.name)}
              >
                Revoke
              </button>
            </li>
          ))}
        </ul>
      )}
      {created && (
        <div class="notice created-password" role="status">
          <p>
            The password of <strong>{created.name}</strong>, shown this once:
          </p>
          <p>
            <code class="secret">{created.password}</code>
          </p>
          <p class="hint">Copy it into the other app now; it cannot be shown again.</p>
        </div>
      )}
      <form class="form inline-form" onSubmit={submit} aria-busy={action.busy}>
        <TextField
          id="app-password-name"
          label="Name of the new app password"
          type="text"
          required
          maxLength={64}
          value={name}
          placeholder="My other app"
          onValue={setName}
        />
        {action.error && <p class="inline-error" role="alert">{action.error}</p>}
        <button type="submit" class="button" disabled={action.busy}>Create app password</button>
      </form>
    </section>
  );
}

function MutedAccounts(): JSX.Element {
  const app = useApp();
  const action = useAction();
  const list = usePaged<ActorProfile>(async (cursor) => {
    const page = await app.client.mutes({ cursor: cursor ?? undefined, limit: 30 });
    return { items: page.profiles, cursor: page.cursor };
  }, []);

  function unmute(did: string): void {
    action.run(async () => {
      await app.client.unmute(did);
      list.update((items) => items.filter((p) => p.did !== did));
    });
  }

  return (
    <section class="settings-part" aria-labelledby="mutes-title">
      <h2 id="mutes-title" class="section-title">Muted accounts</h2>
      <p class="hint">
        Their posts stay out of your timeline and notifications. Only you see this.
      </p>
      {list.loading && list.items.length === 0 && <Loading label="Loading muted accounts…" />}
      {list.error && <ErrorBox message={list.error} retry={list.reload} />}
      {!list.loading && !list.error && list.items.length === 0 && (
        <Empty>
          <p>You have not muted anyone.</p>
        </Empty>
      )}
      {list.items.length > 0 && (
        <ul class="actor-list" aria-label="Muted accounts">
          {list.items.map((p) => (
            <ActorCard key={p.did} actor={p}>
              <button
                type="button"
                class="button small secondary"
                aria-label={`Unmute ${p.display_name?.trim() || p.handle}`}
                disabled={action.busy}
                onClick={() => unmute(p.did)}
              >
                Unmute
              </button>
            </ActorCard>
          ))}
        </ul>
      )}
      {action.error && <p class="inline-error" role="alert">{action.error}</p>}
      {!list.done && list.items.length > 0 && (
        <div ref={list.sentinel} class="sentinel" aria-hidden="true" />
      )}
    </section>
  );
}

/** What a removed record was, in words. */
const RECORD_KINDS: Record<string, string> = {
  [COLLECTION_POST]: "Post",
  [COLLECTION_LIKE]: "Like",
  [COLLECTION_REPOST]: "Repost",
  [COLLECTION_FOLLOW]: "Follow",
  [COLLECTION_BLOCK]: "Block",
  [COLLECTION_PROFILE]: "Profile",
};

/** The words of a removed record worth showing: a post's text, a profile's name. */
function removedText(value: Record<string, unknown>): string | null {
  for (const field of ["text", "displayName", "description"]) {
    const v = value[field];
    if (typeof v === "string" && v.trim() !== "") return v;
  }
  return null;
}

function RemovedByOperator(): JSX.Element {
  const app = useApp();
  const list = usePaged<RecordTakedownInfo>(async (cursor) => {
    const page = await app.client.listRecordTakedowns({ cursor: cursor ?? undefined, limit: 30 });
    return { items: page.takedowns, cursor: page.cursor ?? null };
  }, []);

  return (
    <section class="settings-part" aria-labelledby="removed-title">
      <h2 id="removed-title" class="section-title">Removed by the operator</h2>
      <p class="hint">
        What this server's operator took down of yours. It is hidden everywhere; if you think it was
        a mistake, ask the operator to restore it.
      </p>
      {list.loading && list.items.length === 0 && <Loading label="Loading removed posts…" />}
      {list.error && <ErrorBox message={list.error} retry={list.reload} />}
      {!list.loading && !list.error && list.items.length === 0 && (
        <Empty>
          <p>Nothing of yours has been removed.</p>
        </Empty>
      )}
      {list.items.length > 0 && (
        <ul class="settings-list" aria-label="Removed by the operator">
          {list.items.map((t) => {
            const type = typeof t.value.$type === "string" ? t.value.$type : "";
            const text = removedText(t.value);
            return (
              <li key={t.uri}>
                <span class="settings-item">
                  <strong>{RECORD_KINDS[type] ?? type}</strong>
                  {text !== null && <span class="text">{text}</span>}
                  <span class="hint">
                    Removed {new Date(t.takenDownAt).toLocaleString()}
                    {t.reason ? ` · Reason: ${t.reason}` : ""}
                  </span>
                </span>
              </li>
            );
          })}
        </ul>
      )}
      {!list.done && list.items.length > 0 && (
        <div ref={list.sentinel} class="sentinel" aria-hidden="true" />
      )}
    </section>
  );
}

function DeleteAccount(): JSX.Element {
  const app = useApp();
  const action = useAction();
  const [token, setToken] = useState<string | null>(null);
  const [password, setPassword] = useState("");

  function request(): void {
    action.run(async () => {
      setToken((await app.client.requestAccountDelete()).token);
    });
  }

  function submit(e: Event): void {
    e.preventDefault();
    action.run(async () => {
      await app.client.deleteAccount(password, token ?? "");
      app.signedOut("Your account is deleted.");
    });
  }

  return (
    <section class="settings-part danger-zone" aria-labelledby="delete-title">
      <h2 id="delete-title" class="section-title">Delete account</h2>
      <p class="hint">
        Deletes your posts, likes, follows, pictures and profile for good. This cannot be undone.
      </p>
      {token === null
        ? (
          <>
            {action.error && <p class="inline-error" role="alert">{action.error}</p>}
            <button
              type="button"
              class="button secondary danger"
              disabled={action.busy}
              onClick={request}
            >
              Delete my account…
            </button>
          </>
        )
        : (
          <form class="form" onSubmit={submit} aria-busy={action.busy}>
            <TextField
              id="delete-token"
              label="Confirmation code"
              type="text"
              required
              autoComplete="off"
              value={token}
              onValue={setToken}
              hint="Valid for 15 minutes."
            />
            <TextField
              id="delete-password"
              label="Your password"
              type="password"
              autoComplete="current-password"
              required
              value={password}
              onValue={setPassword}
            />
            {action.error && <p class="inline-error" role="alert">{action.error}</p>}
            <div class="form-row">
              <button type="submit" class="button danger-solid" disabled={action.busy}>
                {action.busy ? "Deleting…" : "Delete my account for good"}
              </button>
              <button
                type="button"
                class="button secondary"
                disabled={action.busy}
                onClick={() => {
                  setToken(null);
                  setPassword("");
                  action.setError(null);
                }}
              >
                Cancel
              </button>
            </div>
          </form>
        )}
    </section>
  );
}
