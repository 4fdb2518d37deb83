/**
 * A labelled text input, the way every form of the app lays one out: the label above, the input,
 * and an optional hint below that the input names with `aria-describedby` (`<id>-hint`).
 *
 * @module
 */

import type { ComponentChildren, JSX } from "preact";

/** Shortest and longest password the account host takes (`pds/accounts/password.ts`). */
export const MIN_PASSWORD = 8;
export const MAX_PASSWORD = 256;

/** Options of {@link TextField}; the rest go to the `<input>` as they are. */
export type TextFieldProps =
  & {
    id: string;
    label: ComponentChildren;
    value: string;
    onValue: (value: string) => void;
    /** Shown under the input and read with it. */
    hint?: ComponentChildren;
  }
  & Omit<JSX.InputHTMLAttributes<HTMLInputElement>, "id" | "value" | "onInput" | "label">;

/** A label, its input, and the hint when given. */
export function TextField(props: TextFieldProps): JSX.Element {
  const { id, label, value, onValue, hint, ...input } = props;
  const hintId = hint === undefined ? undefined : `${id}-hint`;
  return (
    <>
      <label for={id}>{label}</label>
      <input
        id={id}
        {...input}
        value={value}
        aria-describedby={hintId}
        onInput={(e) => onValue((e.target as HTMLInputElement).value)}
      />
      {hint !== undefined && <p id={hintId} class="hint">{hint}</p>}
    </>
  );
}
