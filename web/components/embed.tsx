/**
 * A post's embed (spec 2.2), read defensively (it is network data): images from the account
 * host's `getBlob` with their alt text, an external link card whose texts are text and whose
 * link is followed only when it is http(s), and a quoted post. Unknown embed types show nothing.
 *
 * @module
 */

import type { JSX } from "preact";
import type { Embed } from "../../shared/client.ts";
import {
  EMBED_EXTERNAL,
  EMBED_IMAGES,
  EMBED_RECORD,
  EMBED_RECORD_WITH_MEDIA,
} from "../../shared/nsid.ts";
import { safeHref } from "../lib/text.ts";
import { useApp } from "../state.ts";

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);
const str = (v: unknown): string => (typeof v === "string" ? v : "");

/** The embed of a post by `did`. */
export function EmbedView(props: { did: string; embed: Embed | null }): JSX.Element | null {
  const e = props.embed;
  if (!isObj(e)) return null;
  switch (e.$type) {
    case EMBED_IMAGES:
      return <Images did={props.did} images={e.images} />;
    case EMBED_EXTERNAL:
      return <External external={e.external} />;
    case EMBED_RECORD:
      return <Quote record={e.record} />;
    case EMBED_RECORD_WITH_MEDIA: {
      const media = isObj(e.media) ? e.media : {};
      return (
        <>
          <Quote record={e.record} />
          {media.images !== undefined && <Images did={props.did} images={media.images} />}
          {media.external !== undefined && <External external={media.external} />}
        </>
      );
    }
    default:
      return null;
  }
}

function Images(props: { did: string; images: unknown }): JSX.Element | null {
  const { client } = useApp();
  if (!Array.isArray(props.images)) return null;
  const shown = props.images.filter(isObj).slice(0, 4).flatMap((img) => {
    const ref = isObj(img.image) && isObj(img.image.ref) ? str(img.image.ref.$link) : "";
    if (ref === "") return [];
    const ar = isObj(img.aspectRatio) ? img.aspectRatio : null;
    const w = typeof ar?.width === "number" && ar.width > 0 ? ar.width : null;
    const h = typeof ar?.height === "number" && ar.height > 0 ? ar.height : null;
    return [{ src: client.blobUrl(props.did, ref), alt: str(img.alt), w, h }];
  });
  if (shown.length === 0) return null;
  return (
    <div class={`images images-${shown.length}`}>
      {shown.map((img, i) => (
        <a key={i} href={img.src} target="_blank" rel="noopener noreferrer" class="image-link">
          <img
            src={img.src}
            alt={img.alt}
            title={img.alt || undefined}
            loading="lazy"
            decoding="async"
            width={img.w ?? undefined}
            height={img.h ?? undefined}
          />
        </a>
      ))}
    </div>
  );
}

function External(props: { external: unknown }): JSX.Element | null {
  if (!isObj(props.external)) return null;
  const x = props.external;
  const href = safeHref(str(x.uri));
  const body = (
    <>
      <span class="external-title">{str(x.title) || str(x.uri)}</span>
      {str(x.description) && <span class="external-description">{str(x.description)}</span>}
      <span class="external-host">{href ? new URL(href).host : str(x.uri)}</span>
    </>
  );
  return href
    ? (
      <a class="external" href={href} target="_blank" rel="noopener noreferrer nofollow ugc">
        {body}
      </a>
    )
    : <div class="external">{body}</div>;
}

function Quote(props: { record: unknown }): JSX.Element | null {
  if (!isObj(props.record)) return null;
  const r = props.record;
  const author = isObj(r.author) ? r.author : {};
  const value = isObj(r.value) ? r.value : {};
  const parts = str(r.uri).split("/");
  const path = parts.length === 5 && parts[3] && parts[4]
    ? `/profile/${encodeURIComponent(parts[2])}/post/${encodeURIComponent(parts[4])}`
    : null;
  const body = (
    <>
      <span class="handle">
        {str(author.handle) ? `@${str(author.handle)}` : str(author.did) || "A post"}
      </span>
      {str(value.text) && <span class="quote-text">{str(value.text)}</span>}
    </>
  );
  return path ? <a class="quote" href={path}>{body}</a> : <div class="quote">{body}</div>;
}
