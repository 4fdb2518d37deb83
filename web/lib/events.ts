/**
 * Events between screens: a window event when the member's post or reply was stored and indexed,
 * so the thread on screen shows it.
 *
 * @module
 */

/** Name of the window event fired after a post was indexed (`detail`: its URI). */
export const POSTED_EVENT = "social:posted";
