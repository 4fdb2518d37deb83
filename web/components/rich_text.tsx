/**
 * Network text (posts, descriptions) rendered as text: Preact sets it as text nodes, never as
 * HTML; only http(s) URLs become links, opened in a new tab without a referrer.
 *
 * @module
 */

import type { JSX } from "preact";
import { splitLinks } from "../lib/text.ts";

/** `text` with its http(s) URLs as links. */
export function RichText(props: { text: string; class?: string }): JSX.Element {
  return (
    <p class={props.class ?? "text"}>
      {splitLinks(props.text).map((part, i) =>
        "href" in part
          ? (
            <a key={i} href={part.href} target="_blank" rel="noopener noreferrer nofollow ugc">
              {part.text}
            </a>
          )
          : part.text
      )}
    </p>
  );
}
