/**
 * Writing a post or a reply: a live counter of the 160-grapheme limit counted as the account host
 * counts it (`shared/graphemes.ts`), up to four images with alt text, each fitted into the blob
 * limit in the browser before upload (and a message when one cannot be).
 *
 * @module
 */

import type { JSX } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import type { CreatedRecord, Post, StrongRef } from "../../shared/client.ts";
import { countGraphemes } from "../../shared/graphemes.ts";
import { MAX_IMAGES, MAX_POST_GRAPHEMES } from "../../shared/limits.ts";
import { EMBED_IMAGES } from "../../shared/nsid.ts";
import { errorText, useSessionGuard } from "../hooks.ts";
import { fitImage, type FittedImage, formatBytes, ImageFitError } from "../lib/image.ts";
import { useApp } from "../state.ts";
import { ImageIcon } from "./icons.tsx";

interface Attachment {
  id: number;
  name: string;
  preview: string;
  alt: string;
  fitted: FittedImage | null;
  /** Fitting message: an error, or how it was scaled. */
  note: string | null;
  failed: boolean;
}

let nextId = 1;

/** Options of {@link Composer}. */
export interface ComposerProps {
  /** The post replied to. */
  replyTo?: Post;
  /** After the account host stored the post. */
  onPosted?: (created: CreatedRecord) => void;
  autoFocus?: boolean;
}

/** The post form. */
export function Composer(props: ComposerProps): JSX.Element {
  const app = useApp();
  const guard = useSessionGuard();
  const [text, setText] = useState("");
  const [images, setImages] = useState<Attachment[]>([]);
  const [posting, setPosting] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [status, setStatus] = useState<string | null>(null);
  const area = useRef<HTMLTextAreaElement>(null);
  const file = useRef<HTMLInputElement>(null);
  const idBase = useRef(`composer-${nextId++}`);
  useEffect(() => {
    if (props.autoFocus) area.current?.focus();
  }, []);
  useEffect(() => () => images.forEach((i) => URL.revokeObjectURL(i.preview)), []);

  const count = countGraphemes(text);
  const over = count > MAX_POST_GRAPHEMES;
  const fitting = images.some((i) => i.fitted === null && !i.failed);
  const blocked = images.some((i) => i.failed);
  const empty = text.trim() === "" && images.length === 0;
  const canPost = !posting && !over && !fitting && !blocked && !empty;

  function addFiles(files: FileList | null): void {
    if (files === null) return;
    const room = MAX_IMAGES - images.length;
    const picked = Array.from(files).slice(0, room);
    if (files.length > room) setError(`A post holds at most ${MAX_IMAGES} images`);
    else setError(null);
    for (const f of picked) {
      const a: Attachment = {
        id: nextId++,
        name: f.name,
        preview: URL.createObjectURL(f),
        alt: "",
        fitted: null,
        note: null,
        failed: false,
      };
      setImages((list) => [...list, a]);
      fitImage(f).then(
        (fitted) => {
          const note = fitted.scaled
            ? `Scaled down from ${formatBytes(fitted.originalBytes)} to ${
              formatBytes(fitted.blob.size)
            } to fit`
            : null;
          setImages((list) => list.map((x) => (x.id === a.id ? { ...x, fitted, note } : x)));
        },
        (err) => {
          const note = err instanceof ImageFitError ? err.message : "This image could not be read";
          setImages((list) => list.map((x) => (x.id === a.id ? { ...x, note, failed: true } : x)));
        },
      );
    }
    if (file.current) file.current.value = "";
  }

  function removeImage(id: number): void {
    setImages((list) => {
      const gone = list.find((x) => x.id === id);
      if (gone) URL.revokeObjectURL(gone.preview);
      return list.filter((x) => x.id !== id);
    });
  }

  async function rootOf(parent: Post): Promise<StrongRef> {
    if (parent.root_uri === null || parent.root_uri === parent.uri) {
      return { uri: parent.uri, cid: parent.cid };
    }
    const found = await app.client.getPost(parent.root_uri);
    if (found.post === null) {
      throw new Error(
        "The first post of this thread is not available; the reply cannot be linked to it",
      );
    }
    return { uri: found.post.uri, cid: found.post.cid };
  }

  async function submit(e: Event): Promise<void> {
    e.preventDefault();
    if (!canPost) return;
    setPosting(true);
    setError(null);
    setStatus(null);
    try {
      const uploaded = [];
      for (const [i, img] of images.entries()) {
        setStatus(`Uploading image ${i + 1} of ${images.length}…`);
        const f = img.fitted!;
        const bytes = new Uint8Array(await f.blob.arrayBuffer());
        const blob = await app.client.uploadBlob(bytes, f.mimeType);
        uploaded.push({
          alt: img.alt,
          image: blob,
          aspectRatio: { width: f.width, height: f.height },
        });
      }
      setStatus("Posting…");
      const reply = props.replyTo
        ? {
          parent: { uri: props.replyTo.uri, cid: props.replyTo.cid },
          root: await rootOf(props.replyTo),
        }
        : undefined;
      const created = await app.client.post({
        text,
        reply,
        embed: uploaded.length > 0 ? { $type: EMBED_IMAGES, images: uploaded } : undefined,
      });
      images.forEach((i) => URL.revokeObjectURL(i.preview));
      setText("");
      setImages([]);
      setStatus("Posted");
      setTimeout(() => setStatus((s) => (s === "Posted" ? null : s)), 3000);
      props.onPosted?.(created);
    } catch (err) {
      setStatus(null);
      if (!guard(err)) setError(errorText(err));
    } finally {
      setPosting(false);
    }
  }

  const id = idBase.current;
  return (
    <form class="composer" onSubmit={submit} aria-label={props.replyTo ? "Reply" : "New post"}>
      <label for={`${id}-text`} class="visually-hidden">
        {props.replyTo ? "Your reply" : "What is happening?"}
      </label>
      <textarea
        id={`${id}-text`}
        ref={area}
        value={text}
        rows={3}
        placeholder={props.replyTo ? "Write your reply" : "What is happening?"}
        aria-describedby={`${id}-count`}
        aria-invalid={over}
        onInput={(e) => setText((e.target as HTMLTextAreaElement).value)}
      />
      {images.length > 0 && (
        <ul class="attachments">
          {images.map((img, i) => (
            <li key={img.id} class="attachment">
              <img src={img.preview} alt="" class="attachment-preview" />
              <div class="attachment-fields">
                <label for={`${id}-alt-${img.id}`}>Alt text for image {i + 1}</label>
                <input
                  id={`${id}-alt-${img.id}`}
                  type="text"
                  value={img.alt}
                  maxLength={1000}
                  placeholder="Describe the image for people who cannot see it"
                  onInput={(e) => {
                    const alt = (e.target as HTMLInputElement).value;
                    setImages((list) => list.map((x) => (x.id === img.id ? { ...x, alt } : x)));
                  }}
                />
                {img.fitted === null && !img.failed && (
                  <p class="hint" role="status">Preparing {img.name}…</p>
                )}
                {img.note && (
                  <p
                    class={img.failed ? "inline-error" : "hint"}
                    role={img.failed ? "alert" : "status"}
                  >
                    {img.note}
                  </p>
                )}
                <button type="button" class="link-button" onClick={() => removeImage(img.id)}>
                  Remove image {i + 1}
                </button>
              </div>
            </li>
          ))}
        </ul>
      )}
      <div class="composer-bar">
        <label
          class={`button secondary file-button${images.length >= MAX_IMAGES ? " disabled" : ""}`}
        >
          <ImageIcon />
          <span>Add images</span>
          <input
            ref={file}
            type="file"
            accept="image/*"
            multiple
            class="visually-hidden"
            disabled={images.length >= MAX_IMAGES || posting}
            onChange={(e) => addFiles((e.target as HTMLInputElement).files)}
          />
        </label>
        <span id={`${id}-count`} class={`counter${over ? " over" : ""}`} aria-live="polite">
          {count}/{MAX_POST_GRAPHEMES}
          <span class="visually-hidden">{over ? " characters, too long" : " characters"}</span>
        </span>
        <button type="submit" class="button" disabled={!canPost}>
          {posting ? "Posting…" : props.replyTo ? "Reply" : "Post"}
        </button>
      </div>
      {status && <p class="hint" role="status">{status}</p>}
      {error && <p class="inline-error" role="alert">{error}</p>}
    </form>
  );
}
