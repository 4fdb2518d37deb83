/**
 * Test probe of `native_sign_test.ts`: run with a task's permissions, prints as JSON the path of
 * the OpenSSL library the signer loaded (null when none) and whether a signature it made
 * verifies.
 *
 * @module
 */

import { publicKeyFromPrivate, verifyCompact } from "../../shared/keys.ts";
import { NativeP256Signer } from "./native_sign.ts";

const signer = NativeP256Signer.open();
let verified: boolean | null = null;
if (signer !== null) {
  const key = new Uint8Array(32).fill(0x42);
  const message = new TextEncoder().encode("probe");
  verified = verifyCompact(publicKeyFromPrivate(key), message, signer.sign(key, message));
  signer.close();
}
console.log(JSON.stringify({ path: signer?.path ?? null, verified }));
