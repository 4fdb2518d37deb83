/**
 * Editing one's own profile: display name, description, avatar and banner. The account host
 * overlays the fields sent on the stored record (spec 4.1 rule 3), so an image left unchanged is
 * simply not sent.
 *
 * @module
 */

import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";
import type { BlobRef, ProfileUpdate } from "../../shared/client.ts";
import { countGraphemes } from "../../shared/graphemes.ts";
import { MAX_DESCRIPTION_GRAPHEMES, MAX_DISPLAY_NAME_GRAPHEMES } from "../../shared/limits.ts";
import { Avatar, showHandle } from "../components/avatar.tsx";
import { ErrorBox, Loading } from "../components/states.tsx";
import { errorText, useLoad, useSessionGuard } from "../hooks.ts";
import { fitImage, type FittedImage, formatBytes, ImageFitError } from "../lib/image.ts";
import { useApp } from "../state.ts";

interface Picked {
  fitted: FittedImage;
  preview: string;
  note: string | null;
}

/** The edit-profile screen. */
export function EditProfile(): JSX.Element {
  const app = useApp();
  const guard = useSessionGuard();
  const did = app.session!.did;
  const [state, reload] = useLoad(() => app.client.profileByDid(did), [did]);
  const [name, setName] = useState<string | null>(null);
  const [description, setDescription] = useState<string | null>(null);
  const [avatar, setAvatar] = useState<Picked | null>(null);
  const [banner, setBanner] = useState<Picked | null>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [saved, setSaved] = useState(false);
  useEffect(() => () => {
    if (avatar) URL.revokeObjectURL(avatar.preview);
    if (banner) URL.revokeObjectURL(banner.preview);
  }, [avatar, banner]);

  if (state.status === "loading") return <Loading label="Loading your profile…" />;
  if (state.status === "error") return <ErrorBox message={state.error} retry={reload} />;
  const p = state.data;
  const nameValue = name ?? p.display_name ?? "";
  const descValue = description ?? p.description ?? "";
  const nameCount = countGraphemes(nameValue);
  const descCount = countGraphemes(descValue);
  const tooLong = nameCount > MAX_DISPLAY_NAME_GRAPHEMES || descCount > MAX_DESCRIPTION_GRAPHEMES;

  async function pick(files: FileList | null, set: (p: Picked) => void): Promise<void> {
    const f = files?.[0];
    if (!f) return;
    setError(null);
    try {
      const fitted = await fitImage(f);
      const note = fitted.scaled
        ? `Scaled down from ${formatBytes(fitted.originalBytes)} to ${
          formatBytes(fitted.blob.size)
        } to fit`
        : null;
      set({ fitted, preview: URL.createObjectURL(fitted.blob), note });
    } catch (err) {
      setError(err instanceof ImageFitError ? err.message : "This image could not be read");
    }
  }

  async function upload(picked: Picked): Promise<BlobRef> {
    const bytes = new Uint8Array(await picked.fitted.blob.arrayBuffer());
    return await app.client.uploadBlob(bytes, picked.fitted.mimeType);
  }

  async function save(e: Event): Promise<void> {
    e.preventDefault();
    if (tooLong) return;
    setBusy(true);
    setError(null);
    setSaved(false);
    try {
      const update: ProfileUpdate = {};
      if (name !== null) update.displayName = name.trim() === "" ? null : name.trim();
      if (description !== null) update.description = description.trim() === "" ? null : description;
      if (avatar) update.avatar = await upload(avatar);
      if (banner) update.banner = await upload(banner);
      await app.client.updateProfile(update);
      setSaved(true);
    } catch (err) {
      if (!guard(err)) setError(errorText(err));
    } finally {
      setBusy(false);
    }
  }

  return (
    <>
      <h1 class="screen-title">Edit profile</h1>
      <form class="form" onSubmit={save} aria-busy={busy}>
        <fieldset class="images-fields">
          <legend>Pictures</legend>
          <div class="banner-preview">
            {banner
              ? <img class="banner" src={banner.preview} alt="New banner" />
              : p.banner_cid
              ? (
                <img
                  class="banner"
                  src={app.client.blobUrl(p.did, p.banner_cid)}
                  alt="Current banner"
                />
              )
              : <div class="banner banner-empty" aria-hidden="true" />}
          </div>
          <label for="edit-banner">Banner image</label>
          <input
            id="edit-banner"
            type="file"
            accept="image/*"
            onChange={(e) => pick((e.target as HTMLInputElement).files, setBanner)}
          />
          {banner?.note && <p class="hint" role="status">{banner.note}</p>}
          <div class="avatar-preview">
            {avatar
              ? <img class="avatar avatar-l" src={avatar.preview} alt="New avatar" />
              : (
                <Avatar
                  did={p.did}
                  cid={p.avatar_cid}
                  name={p.display_name || p.handle}
                  size="l"
                />
              )}
          </div>
          <label for="edit-avatar">Avatar image</label>
          <input
            id="edit-avatar"
            type="file"
            accept="image/*"
            onChange={(e) => pick((e.target as HTMLInputElement).files, setAvatar)}
          />
          {avatar?.note && <p class="hint" role="status">{avatar.note}</p>}
        </fieldset>
        <CountedField
          id="edit-name"
          label="Display name"
          value={nameValue}
          count={nameCount}
          max={MAX_DISPLAY_NAME_GRAPHEMES}
          onInput={setName}
        />
        <CountedField
          id="edit-description"
          label="Description"
          value={descValue}
          count={descCount}
          max={MAX_DESCRIPTION_GRAPHEMES}
          multiline
          onInput={setDescription}
        />
        {error && <p class="inline-error" role="alert">{error}</p>}
        {saved && (
          <p class="notice" role="status">
            Saved.{" "}
            <a href={`/profile/${encodeURIComponent(p.handle || p.did)}`}>
              See your profile as {showHandle(p.handle)}
            </a>
          </p>
        )}
        <button type="submit" class="button" disabled={busy || tooLong}>
          {busy ? "Saving…" : "Save"}
        </button>
      </form>
    </>
  );
}

/** A labelled text field with its grapheme counter (the limit the account host enforces). */
function CountedField(props: {
  id: string;
  label: string;
  value: string;
  count: number;
  max: number;
  multiline?: boolean;
  onInput: (value: string) => void;
}): JSX.Element {
  const over = props.count > props.max;
  const field = {
    id: props.id,
    value: props.value,
    "aria-describedby": `${props.id}-count`,
    "aria-invalid": over,
    onInput: (e: Event) => props.onInput((e.target as HTMLInputElement).value),
  };
  return (
    <>
      <label for={props.id}>{props.label}</label>
      {props.multiline ? <textarea rows={4} {...field} /> : <input type="text" {...field} />}
      <p id={`${props.id}-count`} class={`hint counter${over ? " over" : ""}`}>
        {props.count}/{props.max}
      </p>
    </>
  );
}
