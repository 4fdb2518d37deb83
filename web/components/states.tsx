/**
 * The states every screen shows the same way: loading, an error with a retry, and empty.
 *
 * @module
 */

import type { ComponentChildren, JSX } from "preact";

/** A loading indicator, announced to screen readers. */
export function Loading(props: { label?: string }): JSX.Element {
  return (
    <p class="state loading" role="status" aria-live="polite">
      <span class="spinner" aria-hidden="true" />
      {props.label ?? "Loading…"}
    </p>
  );
}

/** A failure, with a retry button when `retry` is given. */
export function ErrorBox(props: { message: string; retry?: () => void }): JSX.Element {
  return (
    <div class="state error" role="alert">
      <p>{props.message}</p>
      {props.retry && (
        <button type="button" class="button secondary" onClick={props.retry}>Try again</button>
      )}
    </div>
  );
}

/** An empty list. */
export function Empty(props: { children: ComponentChildren }): JSX.Element {
  return <div class="state empty">{props.children}</div>;
}
