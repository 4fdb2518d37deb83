/**
 * Reporting a post or an account to the server's operator (`com.atproto.moderation.createReport`,
 * docs/behaviour.md 4.1 rule 8, 10.11): a modal dialog with the reason types in plain words, an
 * optional text counted against the account host's limit, and its sending, sent and error states.
 * Opened with the first reason focused; Escape or Cancel closes it and the browser returns focus
 * to the button that opened it.
 *
 * @module
 */

import type { JSX } from "preact";
import { useEffect, useLayoutEffect, useRef, useState } from "preact/hooks";
import { type ReportReasonType, type StrongRef, XrpcClientError } from "../../shared/client.ts";
import { countGraphemes } from "../../shared/graphemes.ts";
import { errorText, useSessionGuard, waitText } from "../hooks.ts";
import { useApp } from "../state.ts";

/** Longest report text the account host takes, as the lexicon says (`pds/moderation/reports.ts`). */
export const MAX_REPORT_GRAPHEMES = 2_000;
const MAX_REPORT_LENGTH = 20_000;

/** What the dialog offers, in the order shown: the lexicon's reasons but the appeal. */
export const REPORT_REASONS: readonly { type: ReportReasonType; label: string; hint: string }[] = [
  {
    type: "com.atproto.moderation.defs#reasonSpam",
    label: "Spam",
    hint: "Ads, scams, or the same thing posted over and over",
  },
  {
    type: "com.atproto.moderation.defs#reasonRude",
    label: "Harassment or rudeness",
    hint: "Bullying, insults, threats or hate",
  },
  {
    type: "com.atproto.moderation.defs#reasonMisleading",
    label: "Misleading",
    hint: "False information, or pretending to be someone else",
  },
  {
    type: "com.atproto.moderation.defs#reasonSexual",
    label: "Sexual content",
    hint: "Nudity or sexual content that does not belong here",
  },
  {
    type: "com.atproto.moderation.defs#reasonViolation",
    label: "Breaks the rules",
    hint: "Against this server's rules or the law",
  },
  {
    type: "com.atproto.moderation.defs#reasonOther",
    label: "Something else",
    hint: "Say what in the text below",
  },
];

/** Shown once the account host stored the report. */
export const REPORT_SENT = "Thanks, the server's operator will look at it.";

/** A failed report as the member reads it: the server's message, or when to try again. */
export function reportErrorText(err: unknown): string {
  if (err instanceof XrpcClientError && err.status === 429) {
    const when = err.retryAfter === undefined ? "later" : waitText(err.retryAfter);
    return `You have sent as many reports as this server takes for now. Try again ${when}.`;
  }
  return errorText(err);
}

let nextId = 1;

/** Options of {@link ReportDialog}. */
export interface ReportDialogProps {
  /** An account (`{did}`) or a post at the version seen (`{uri, cid}`). */
  subject: { did: string } | StrongRef;
  /** The dialog's title: "Report post", "Report @bob.test". */
  title: string;
  /** Who is reported, for the note that they are not told ("@bob.test"). */
  who: string;
  /** The reported post's text, quoted so the member sees what they report. */
  quote?: string;
  onClose: () => void;
}

/** The report dialog, open as soon as it is rendered. */
export function ReportDialog(props: ReportDialogProps): JSX.Element {
  const app = useApp();
  const guard = useSessionGuard();
  const ref = useRef<HTMLDialogElement>(null);
  const first = useRef<HTMLInputElement>(null);
  const done = useRef<HTMLButtonElement>(null);
  const id = useRef(`report-${nextId++}`).current;
  const [reason, setReason] = useState<ReportReasonType | null>(null);
  const [text, setText] = useState("");
  const [phase, setPhase] = useState<"form" | "sending" | "sent">("form");
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
    first.current?.focus();
  }, []);
  // In the commit that shows the thanks, not after the next paint: a keyboard or screen reader
  // user is never left on the removed Send button (and the browser test sees no gap).
  useLayoutEffect(() => {
    if (phase === "sent") done.current?.focus();
  }, [phase]);

  const count = countGraphemes(text);
  const over = count > MAX_REPORT_GRAPHEMES || text.length > MAX_REPORT_LENGTH;
  const sending = phase === "sending";
  const close = () => ref.current?.close();

  async function send(e: Event): Promise<void> {
    e.preventDefault();
    if (reason === null || over || sending) return;
    setPhase("sending");
    setError(null);
    const trimmed = text.trim();
    try {
      await app.client.createReport({
        subject: props.subject,
        reasonType: reason,
        ...(trimmed === "" ? {} : { reason: trimmed }),
      });
      setPhase("sent");
    } catch (err) {
      setPhase("form");
      if (!guard(err)) setError(reportErrorText(err));
    }
  }

  return (
    <dialog
      ref={ref}
      class="dialog report-dialog"
      aria-labelledby={`${id}-title`}
      onClose={props.onClose}
    >
      <div class="dialog-head">
        <h2 id={`${id}-title`}>{props.title}</h2>
      </div>
      {phase === "sent"
        ? (
          <>
            <p class="notice" role="status">{REPORT_SENT}</p>
            <div class="dialog-actions">
              <button type="button" class="button" ref={done} onClick={close}>Close</button>
            </div>
          </>
        )
        : (
          <form onSubmit={send} aria-labelledby={`${id}-title`}>
            {props.quote !== undefined && props.quote !== "" && (
              <blockquote class="report-quote">{props.quote}</blockquote>
            )}
            <p class="hint">
              Your report goes to the people who run this server. {props.who} is not told.
            </p>
            <fieldset class="report-reasons" disabled={sending}>
              <legend>What is wrong?</legend>
              {REPORT_REASONS.map((r, i) => (
                <label class="report-reason" key={r.type}>
                  <input
                    ref={i === 0 ? first : undefined}
                    type="radio"
                    name={`${id}-reason`}
                    value={r.type}
                    checked={reason === r.type}
                    onChange={() => setReason(r.type)}
                  />
                  <span>
                    <span class="report-reason-label">{r.label}</span>
                    <span class="hint">{r.hint}</span>
                  </span>
                </label>
              ))}
            </fieldset>
            <label for={`${id}-text`} class="report-text-label">
              Anything to add? (optional)
            </label>
            <textarea
              id={`${id}-text`}
              value={text}
              rows={3}
              disabled={sending}
              aria-describedby={`${id}-count`}
              aria-invalid={over}
              onInput={(e) => setText((e.target as HTMLTextAreaElement).value)}
            />
            <span id={`${id}-count`} class={`counter${over ? " over" : ""}`} aria-live="polite">
              {count}/{MAX_REPORT_GRAPHEMES}
              <span class="visually-hidden">{over ? " characters, too long" : " characters"}</span>
            </span>
            {error && <p class="inline-error" role="alert">{error}</p>}
            <div class="dialog-actions">
              <button type="button" class="button secondary" onClick={close}>Cancel</button>
              <button type="submit" class="button" disabled={reason === null || over || sending}>
                {sending ? "Sending…" : "Send report"}
              </button>
            </div>
          </form>
        )}
    </dialog>
  );
}
